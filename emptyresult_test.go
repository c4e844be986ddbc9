package idemkit_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestEmptyResultAnsweredAsReplayed: a function's empty result ([]byte{}) came back non-nil on the
// first call and nil on every replay (no Store tells an empty result from none), so a caller comparing
// the two answers (reflect.DeepEqual, or Value == nil) saw the duplicate answered differently. The
// first call answers nil too, in Execute, Tx and with the cache.
func TestEmptyResultAnsweredAsReplayed(t *testing.T) {
	ctx := context.Background()
	for _, locker := range []bool{false, true} {
		s := memory.NewStore()
		var opts idemkit.Options
		if locker {
			opts.Locker = memory.NewLocker(nil)
		}
		g, err := idemkit.New(s, &opts)
		if err != nil {
			t.Fatal(err)
		}
		empty := func(context.Context) ([]byte, error) { return []byte{}, nil }
		calls := map[string]func(key string) (idemkit.Result, error){
			"Do": func(key string) (idemkit.Result, error) { return g.Do(ctx, idemkit.Call{Scope: "s", Key: key}, empty) },
			"Tx": func(key string) (idemkit.Result, error) {
				return g.Tx(ctx, s, idemkit.Call{Scope: "s", Key: key}, func(ctx context.Context, _ idemkit.TxStore) ([]byte, error) { return empty(ctx) })
			},
		}
		for name, call := range calls {
			first, err := call(name)
			if err != nil {
				t.Fatal(err)
			}
			replay, err := call(name)
			if err != nil || !replay.Replayed {
				t.Fatalf("%s (Locker %v): replay %+v, %v", name, locker, replay, err)
			}
			if !reflect.DeepEqual(first.Value, replay.Value) {
				t.Errorf("%s (Locker %v): first call answered %#v, the replay %#v", name, locker, first.Value, replay.Value)
			}
		}
	}
}
