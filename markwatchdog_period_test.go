package idemkit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestMarkWatchdogLockTTLLongerThanLease: Mark mode's watchdog ticks every third of the shorter of
// LockTTL and Lease, as Extend moves the mark's expiry to now+Lease; it ticked every LockTTL/3, and
// with LockTTL > 3*Lease the mark expired between renewals, the sweeper deleted it and the key ran
// again (found by a review). The times are three times the smallest that show it (Lease 100ms, LockTTL
// 900ms): a renewal every Lease/3 then has 200ms of slack, which a loaded 2-core machine took from the
// 67ms the smaller times left (a flake, seen once), while one every LockTTL/3 still misses the lease.
func TestMarkWatchdogLockTTLLongerThanLease(t *testing.T) {
	store := memory.NewStore()
	g, err := idemkit.New(store, &idemkit.Options{Locker: memory.NewLocker(nil),
		Lease: 300 * time.Millisecond, LockTTL: 2700 * time.Millisecond, TTL: 300 * time.Millisecond, Watchdog: true})
	if err != nil {
		t.Fatal(err)
	}
	stopSweep := make(chan struct{})
	go func() { // the sweeper
		for {
			select {
			case <-stopSweep:
				return
			case <-time.After(20 * time.Millisecond):
				_, _ = store.DeleteExpired(context.Background(), time.Now(), 100)
			}
		}
	}()
	defer close(stopSweep)
	call := idemkit.Call{Scope: "s", Key: "k"}
	var runs atomic.Int32
	var ctxErr error
	err = g.Mark(context.Background(), call, func(ctx context.Context) error {
		runs.Add(1)
		select {
		case <-time.After(2400 * time.Millisecond):
		case <-ctx.Done():
			ctxErr = context.Cause(ctx)
			return ctx.Err()
		}
		return nil
	})
	t.Logf("first Mark: %v (function's context: %v)", err, ctxErr)
	err2 := g.Mark(context.Background(), call, func(context.Context) error { runs.Add(1); return nil })
	if runs.Load() != 1 || err != nil {
		t.Fatalf("Lease 300ms, LockTTL 2.7s, TTL 300ms, function 2.4s: first Mark %v (fn ctx cause %v); duplicate right after: %v; function ran %d times",
			err, ctxErr, err2, runs.Load())
	}
}
