package idemkit_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// The in-process cost of the Guard itself: memory Store and Locker, so no network.
//
//	go test -run '^$' -bench . -benchmem .

func benchGuard(b *testing.B) *idemkit.Guard {
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: memory.NewLocker(nil)})
	if err != nil {
		b.Fatal(err)
	}
	return g
}

var result = []byte(`{"order_id":"o-1","status":"PAID"}`)

func work(context.Context) ([]byte, error) { return result, nil }

func BenchmarkDoNewKey(b *testing.B) {
	g := benchGuard(b)
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := g.Do(context.Background(), idemkit.Call{Scope: "POST /orders", Key: keys[i]}, work); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDoReplayCached(b *testing.B) {
	g := benchGuard(b)
	call := idemkit.Call{Scope: "POST /orders", Key: "key-1"}
	if _, err := g.Do(context.Background(), call, work); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if res, err := g.Do(context.Background(), call, work); err != nil || !res.Replayed {
			b.Fatal(res, err)
		}
	}
}

func BenchmarkMarkNewKey(b *testing.B) {
	g := benchGuard(b)
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := g.Mark(context.Background(), idemkit.Call{Scope: "orders", Key: keys[i]}, func(context.Context) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
