package idemkit_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestEmptyRejectionAnsweredAsReplayed: a permanent failure's value is stored with the rejection and
// replayed; an empty one ([]byte{}) came back non-nil to the first call and nil on every replay (no
// Store tells an empty value from none), as an empty success's did before
// TestEmptyResultAnsweredAsReplayed. The first call answers nil too, in Execute and Tx mode and with
// the cache (found by a defect hunt).
func TestEmptyRejectionAnsweredAsReplayed(t *testing.T) {
	ctx := context.Background()
	refuse := func(context.Context) ([]byte, error) { return []byte{}, idemkit.Permanent(errors.New("out of stock")) }
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
		calls := map[string]func(key string) (idemkit.Result, error){
			"Do": func(key string) (idemkit.Result, error) { return g.Do(ctx, idemkit.Call{Scope: "s", Key: key}, refuse) },
			"Tx": func(key string) (idemkit.Result, error) {
				return g.Tx(ctx, s, idemkit.Call{Scope: "s", Key: key}, func(ctx context.Context, _ idemkit.TxStore) ([]byte, error) { return refuse(ctx) })
			},
		}
		for name, call := range calls {
			first, err := call(name)
			if !idemkit.IsPermanent(err) {
				t.Fatalf("%s: first call %v", name, err)
			}
			replay, err := call(name)
			if !errors.Is(err, idemkit.ErrRejected) || !replay.Replayed {
				t.Fatalf("%s (Locker %v): replay %+v, %v", name, locker, replay, err)
			}
			if !reflect.DeepEqual(first.Value, replay.Value) {
				t.Errorf("%s (Locker %v): first call answered %#v, the replay %#v", name, locker, first.Value, replay.Value)
			}
		}
	}
}
