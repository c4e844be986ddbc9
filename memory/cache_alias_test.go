package memory_test

import (
	"context"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestCachedReplayIsNotAliased: a replay answered from the memory Locker's cache hands out the
// cached bytes themselves, so a caller that writes into its Result.Value changes what every later
// duplicate is answered, and the cache then contradicts the record (memory.Store clones on Get).
func TestCachedReplayIsNotAliased(t *testing.T) {
	ctx := context.Background()
	st := memory.NewStore()
	g, err := idemkit.New(st, &idemkit.Options{Locker: memory.NewLocker(nil)})
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "pay", Key: "k1"}
	fn := func(context.Context) ([]byte, error) { return []byte("paid 100"), nil }
	if _, err := g.Do(ctx, call, fn); err != nil {
		t.Fatal(err)
	}
	res, err := g.Do(ctx, call, fn) // replay, from the cache
	if err != nil || !res.Replayed {
		t.Fatalf("replay: %+v %v", res, err)
	}
	copy(res.Value, "XXXX") // the caller reuses its buffer
	res2, err := g.Do(ctx, call, fn)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := st.Get(ctx, "pay", "k1")
	if string(res2.Value) != string(rec.Response) {
		t.Fatalf("cached replay %q contradicts the record %q", res2.Value, rec.Response)
	}
}
