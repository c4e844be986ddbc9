package idemkit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

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

// nopStore and nopLocker accept everything and keep nothing: benchmarks over them measure the
// Guard's own work, without a backend's maps growing under the benchmark.
type nopStore struct{}

func (nopStore) Insert(context.Context, *idemkit.Record) error { return nil }
func (nopStore) Get(context.Context, string, string) (*idemkit.Record, error) {
	return nil, idemkit.ErrNotFound
}
func (nopStore) Update(context.Context, *idemkit.Record, idemkit.Version) error { return nil }
func (nopStore) Delete(context.Context, string, string, idemkit.Version) error  { return nil }

// nopTx is a TxBeginner over nopStore whose transactions do nothing.
type nopTx struct{ nopStore }

func (nopTx) BeginTx(context.Context) (idemkit.TxStore, error) { return nopTx{}, nil }
func (nopTx) Commit() error                                    { return nil }
func (nopTx) Rollback() error                                  { return nil }

type nopLocker struct{ cached []byte }

func (l nopLocker) Acquire(context.Context, string, string, time.Duration) ([]byte, error) {
	return l.cached, nil
}
func (nopLocker) Refresh(context.Context, string, string, time.Duration) error         { return nil }
func (nopLocker) Release(context.Context, string, string, []byte, time.Duration) error { return nil }

// BenchmarkGuardOverhead is the Guard's in-process cost per call, backends excluded.
func BenchmarkGuardOverhead(b *testing.B) {
	call := idemkit.Call{Scope: "POST /orders", Key: "key-1", Fingerprint: "fp"}
	b.Run("NewKey", func(b *testing.B) {
		g, err := idemkit.New(nopStore{}, &idemkit.Options{Locker: nopLocker{}})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for range b.N {
			if _, err := g.Do(context.Background(), call, work); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A cancellable context, as a server's request has: the writes after the function then need a
	// context of their own only when they happen.
	b.Run("NewKeyCancellable", func(b *testing.B) {
		g, err := idemkit.New(nopStore{}, &idemkit.Options{Locker: nopLocker{}})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		b.ReportAllocs()
		for range b.N {
			if _, err := g.Do(ctx, call, work); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("TxNewKey", func(b *testing.B) {
		g, err := idemkit.New(nopStore{}, &idemkit.Options{Locker: nopLocker{}})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		fn := func(context.Context, idemkit.TxStore) ([]byte, error) { return result, nil }
		b.ReportAllocs()
		for range b.N {
			if _, err := g.Tx(ctx, nopTx{}, call, fn); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ReplayCached", func(b *testing.B) {
		// A real cached entry, produced by a Guard over memory backends.
		locker := memory.NewLocker(nil)
		g0, _ := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: locker})
		if _, err := g0.Do(context.Background(), call, work); err != nil {
			b.Fatal(err)
		}
		g, _ := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: locker})
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if res, err := g.Do(context.Background(), call, work); err != nil || !res.Replayed {
				b.Fatal(res, err)
			}
		}
	})
}
