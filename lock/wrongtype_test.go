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

// TestForgetDeletesValueOfAnotherType: a key of another Redis type than a string under the Locker's
// name (a hash, a list, a set: another application sharing the prefix, an operator's mistake) is
// refused by Acquire with WRONGTYPE, so a Guard that fails closed answers its key
// ErrLockUnavailable for as long as Redis keeps it — forever without an expiry. No attempt holds it,
// as with a damaged lock value, yet Forget, the operators' repair (admin.Admin.ForgetCached,
// idemctl purge and release), failed on it with WRONGTYPE, as did Release (the Guard retried it in
// the background), and State gave a bare WRONGTYPE error, so only a DEL by hand freed the key. State
// now reports it as damaged, Release as holding no lock, and Forget deletes it.
func TestForgetDeletesValueOfAnotherType(t *testing.T) {
	l, b := setup(t)
	ctx := testCtx(t)
	g := newGuard(t, memory.NewStore(), &idemkit.Options{Locker: l})
	plant := map[string]func(k string) error{
		"hash": func(k string) error { return b.rdb.HSet(ctx, k, "f", "v").Err() },
		"list": func(k string) error { return b.rdb.RPush(ctx, k, "L1:t").Err() },
		"set":  func(k string) error { return b.rdb.SAdd(ctx, k, "x").Err() },
	}
	for name, put := range plant {
		t.Run(name, func(t *testing.T) {
			call := idemkit.Call{Scope: "s", Key: "wrongtype-" + name}
			ad, err := g.Address(call.Scope, call.Key)
			must(t, err)
			must(t, put(l.Key(ad.LockKey)))
			must(t, b.rdb.Expire(ctx, l.Key(ad.LockKey), time.Hour).Err())
			run := func(context.Context) ([]byte, error) { return []byte("v"), nil }
			if _, err := g.Do(ctx, call, run); !errors.Is(err, idemkit.ErrLockUnavailable) {
				t.Fatalf("Do over a %s: %v, want ErrLockUnavailable (failing closed)", name, err)
			}
			s, err := l.State(ctx, ad.LockKey)
			if !errors.Is(err, lock.ErrDamagedLock) || s.TTL <= 0 || s.TTL > time.Hour || s.Locked || s.Cached {
				t.Fatalf("State of a %s = %+v, %v; want ErrDamagedLock with its TTL", name, s, err)
			}
			if err := l.Release(ctx, ad.LockKey, "tok", nil, 0); !errors.Is(err, idemkit.ErrLockNotHeld) {
				t.Fatalf("Release over a %s = %v; want ErrLockNotHeld (no lock there)", name, err)
			}
			if ok, err := l.Forget(ctx, ad.LockKey, ""); err != nil || !ok {
				t.Fatalf("Forget of a %s = %v, %v; want it deleted", name, ok, err)
			}
			if res, err := g.Do(ctx, call, run); err != nil || string(res.Value) != "v" {
				t.Fatalf("Do after Forget: %+v, %v; want it run", res, err)
			}
		})
	}
}
