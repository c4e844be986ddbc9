package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
)

// TestForgetDeletesDamagedLock: a value that starts like a lock but is none the Locker wrote (no
// deadline, no token: cut short by a partial copy, an operator's edit) is refused by Acquire, so a
// Guard that fails closed answers its key ErrLockUnavailable for as long as Redis keeps it — forever
// without an expiry. Nobody holds such a lock (no token can refresh or release it), yet Forget, the
// operators' repair in code (admin.Admin.ForgetCached), left it in place as another attempt's lock,
// and only a DEL by hand freed the key. Forget now deletes it; a well-formed lock of another token
// still stays.
func TestForgetDeletesDamagedLock(t *testing.T) {
	l, b := setup(t)
	ctx := testCtx(t)
	g := newGuard(t, memory.NewStore(), &idemkit.Options{Locker: l})
	for _, damaged := range []string{"Lgarbage", "L:token", "L12x:token", "L", "L123"} {
		t.Run(damaged, func(t *testing.T) {
			call := idemkit.Call{Scope: "s", Key: damaged}
			ad, err := g.Address(call.Scope, call.Key)
			must(t, err)
			must(t, b.rdb.Set(ctx, l.Key(ad.LockKey), damaged, 0).Err())
			run := func(context.Context) ([]byte, error) { return []byte("v"), nil }
			if _, err := g.Do(ctx, call, run); !errors.Is(err, idemkit.ErrLockUnavailable) {
				t.Fatalf("Do over a damaged lock: %v, want ErrLockUnavailable (failing closed)", err)
			}
			if ok, err := l.Forget(ctx, ad.LockKey, ""); err != nil || !ok {
				t.Fatalf("Forget of a damaged lock = %v, %v; want it deleted", ok, err)
			}
			if res, err := g.Do(ctx, call, run); err != nil || string(res.Value) != "v" {
				t.Fatalf("Do after Forget: %+v, %v; want it run", res, err)
			}
		})
	}
	// A lock the Locker wrote stays, whoever's it is.
	if _, err := l.Acquire(ctx, "held", "holder", 60e9); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.Forget(ctx, "held", ""); err != nil || ok {
		t.Fatalf("Forget of another attempt's lock = %v, %v; want it kept", ok, err)
	}
}

// TestStateTellsDamagedLock: State's error for a lock value wraps lock.ErrDamagedLock exactly when
// Forget deletes the value (a damaged one: no deadline or no token), with the value's TTL, so that
// operators' tools can handle it as Forget does; a well-formed lock reads as one, and a deadline
// beyond what the Locker writes is malformed without being damaged (Forget keeps it).
func TestStateTellsDamagedLock(t *testing.T) {
	l, b := setup(t)
	ctx := testCtx(t)
	for v, damaged := range map[string]bool{
		"Lgarbage": true, "L:token": true, "L12x:token": true, "L": true, "L123": true, "Lx1:t": true,
		"L99999999999999999999:token": false,
	} {
		key := "state-" + v
		must(t, b.rdb.Set(ctx, l.Key(key), v, time.Hour).Err())
		s, err := l.State(ctx, key)
		if got := errors.Is(err, lock.ErrDamagedLock); got != damaged || err == nil {
			t.Errorf("State of %q = %+v, %v; want an error, damaged %v", v, s, err, damaged)
		}
		if damaged && (s.TTL <= 0 || s.TTL > time.Hour || s.Locked || s.Cached) {
			t.Errorf("State of %q = %+v; want only its TTL", v, s)
		}
		deleted, err := l.Forget(ctx, key, "")
		if err != nil || deleted != damaged {
			t.Errorf("Forget of %q = %v, %v; want deleted %v, as State tells", v, deleted, err, damaged)
		}
	}
}
