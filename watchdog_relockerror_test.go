package idemkit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// failingRelocker is a restartingLocker whose Acquires fail, as a Redis that answers one command and
// not the next does (a flapping connection, a deadline spent by a slow command, OOM), while failing
// is above zero (each failure counts it down).
type failingRelocker struct {
	*restartingLocker
	failing atomic.Int32
}

var errFlapping = errors.New("injected: Redis did not answer")

func (f *failingRelocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	if f.failing.Add(-1) >= 0 {
		return nil, errFlapping
	}
	return f.restartingLocker.Acquire(ctx, key, token, ttl)
}

// TestTxWatchdogRelockThatFailsIsALockerError: in the Tx modes a renewal that finds the lock gone (a
// Redis restarted) takes it again; when that Acquire failed — Redis lost the key and then did not
// answer the next command — the watchdog took the failure for another attempt holding the key and
// cancelled the function at once with ErrLockLost ("lock not held"), with FailOpen too, where a Locker
// error is ignored, and without it, where a renewal that fails is tried again until the lease is
// about to lapse. A failed relock is a Locker error now: ignored under FailOpen, retried without it;
// here the next renewal takes the lock and the function carries on.
func TestTxWatchdogRelockThatFailsIsALockerError(t *testing.T) {
	const lockTTL = 600 * time.Millisecond
	for _, failOpen := range []bool{false, true} {
		s := memory.NewStore()
		locker := &failingRelocker{restartingLocker: newRestartingLocker()}
		g, err := idemkit.New(s, &idemkit.Options{Locker: locker, LockTTL: lockTTL, Watchdog: true, FailOpen: failOpen, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		c := idemkit.Call{Scope: "s", Key: "k"}
		var cause error
		res, err := g.Tx(ctxb, s, c, func(ctx context.Context, _ idemkit.TxStore) ([]byte, error) {
			locker.restart()
			locker.failing.Store(1) // the first relock fails
			select {                // three renewal periods
			case <-ctx.Done():
				cause = context.Cause(ctx)
				return nil, cause
			case <-time.After(lockTTL):
				return []byte("v"), nil
			}
		})
		if err != nil || cause != nil || string(res.Value) != "v" {
			t.Fatalf("FailOpen %v: the call answered %q, %v, the function's context %v; want it carried on", failOpen, res.Value, err, cause)
		}
		if n := locker.failing.Load(); n >= 0 {
			t.Fatalf("FailOpen %v: no relock was tried (%d failures left)", failOpen, n+1)
		}
		ran := false
		if _, err := g.Tx(ctxb, s, c, func(context.Context, idemkit.TxStore) ([]byte, error) { ran = true; return nil, nil }); ran || err != nil {
			t.Fatalf("FailOpen %v: the duplicate ran %v, answered %v", failOpen, ran, err)
		}
	}
}
