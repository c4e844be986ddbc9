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

// TestRefreshOverValueOfAnotherType: a value of another Redis type than a string put under a key's
// name while its attempt runs (another application sharing the prefix, an operator's mistake) holds
// no lock of the attempt, as Release reports, yet Refresh failed with WRONGTYPE, a Redis error: a
// watchdog failing closed took it for Redis failing and cancelled an Execute-mode function whose
// claim, its record, was its own all along. Refresh reports the lock not held now, and the watchdog
// renews the record and lets the function finish.
func TestRefreshOverValueOfAnotherType(t *testing.T) {
	const ttl = 1500 * time.Millisecond // the watchdog renews every 500ms
	for _, scripts := range []bool{false, true} {
		t.Run(map[bool]string{false: "native", true: "scripts"}[scripts], func(t *testing.T) {
			l, b := setupMode(t, scripts)
			ctx := testCtx(t)
			_, err := l.Acquire(ctx, "held", "tok", time.Minute)
			must(t, err)
			must(t, b.rdb.Del(ctx, l.Key("held")).Err())
			must(t, b.rdb.HSet(ctx, l.Key("held"), "f", "v").Err())
			if err := l.Refresh(ctx, "held", "tok", time.Minute); !errors.Is(err, idemkit.ErrLockNotHeld) {
				t.Fatalf("Refresh over a hash = %v; want ErrLockNotHeld", err)
			}
			must(t, b.rdb.Del(ctx, l.Key("held")).Err())

			g := newGuard(t, memory.NewStore(), &idemkit.Options{Locker: l, Watchdog: true, LockTTL: ttl, Lease: time.Minute})
			call := idemkit.Call{Scope: "s", Key: "planted"}
			ad, err := g.Address(call.Scope, call.Key)
			must(t, err)
			res, err := g.Do(ctx, call, func(ctx context.Context) ([]byte, error) {
				k := l.Key(ad.LockKey)
				if err := b.rdb.Del(ctx, k).Err(); err != nil {
					return nil, err
				}
				if err := b.rdb.HSet(ctx, k, "f", "v").Err(); err != nil {
					return nil, err
				}
				select { // several renewals' time: each finds the hash
				case <-time.After(3 * ttl):
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
				return []byte("done"), b.rdb.Del(ctx, k).Err()
			})
			if err != nil || string(res.Value) != "done" {
				t.Fatalf("Do with a hash planted under its lock = %+v, %v; want the function finished", res, err)
			}
		})
	}
}
