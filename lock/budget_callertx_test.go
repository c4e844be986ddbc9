package lock_test

import (
	"context"
	"slices"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
)

// TestRoundTripBudgetCallerTx counts the README's "Round trips" rows for the modes that write through
// the caller's transaction: a new key in MarkTx and in DoTx is two commands, a native SET for the
// lock and one script (the compare-and-delete release: nothing is cached before the caller commits).
func TestRoundTripBudgetCallerTx(t *testing.T) {
	_, rdb := privateRedis(t)
	counter := &cmdCounter{}
	rdb.AddHook(counter)
	ctx := testCtx(t)
	if err := rdb.Ping(ctx).Err(); err != nil { // open the connection outside the counts
		t.Fatal(err)
	}
	st := memory.NewStore()
	g := newGuard(t, st, &idemkit.Options{Locker: lock.New(rdb, nil)})
	markTx := func(key string) error {
		return g.MarkTx(ctx, st, idemkit.Call{Scope: "s", Key: key}, func(context.Context) error { return nil })
	}
	if err := markTx("warm"); err != nil { // loads the script: EVALSHA, NOSCRIPT, EVAL
		t.Fatal(err)
	}
	want := []string{"set", "evalsha"}
	counter.take()
	if err := markTx("new"); err != nil {
		t.Fatal(err)
	}
	if cmds := counter.take(); !slices.Equal(cmds, want) {
		t.Errorf("MarkTx, new key: commands %v, want %v", cmds, want)
	}
	if _, err := g.DoTx(ctx, st, idemkit.Call{Scope: "s", Key: "dotx"}, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if cmds := counter.take(); !slices.Equal(cmds, want) {
		t.Errorf("DoTx, new key: commands %v, want %v", cmds, want)
	}
}
