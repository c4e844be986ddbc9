package idemkit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestMarkWatchdogPastTTL: Mark with the watchdog on, function running past TTL, no Locker: a
// duplicate does not run the function while the first run is alive, as in Execute mode
// (TestWatchdogKeepsClaimPastTTL); the renewals left the mark's expiry behind, and duplicates took
// the expired mark over (found by a defect hunt).
func TestMarkWatchdogPastTTL(t *testing.T) {
	store := memory.NewStore()
	g, err := idemkit.New(store, &idemkit.Options{Lease: 300 * time.Millisecond, TTL: 300 * time.Millisecond, Watchdog: true})
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "s", Key: "k"}
	var running, runs atomic.Int32
	done := make(chan error, 1)
	release := make(chan struct{})
	go func() {
		done <- g.Mark(ctxb, call, func(ctx context.Context) error {
			runs.Add(1)
			running.Add(1)
			defer running.Add(-1)
			<-release
			return ctx.Err()
		})
	}()
	time.Sleep(100 * time.Millisecond)
	var concurrent bool
	for i := 0; i < 6; i++ {
		time.Sleep(150 * time.Millisecond)
		_ = g.Mark(ctxb, call, func(context.Context) error {
			runs.Add(1)
			if running.Load() > 0 {
				concurrent = true
			}
			return nil
		})
	}
	close(release)
	err = <-done
	if concurrent || runs.Load() != 1 {
		t.Fatalf("Mark with Watchdog: %d runs of the function for one key, concurrent=%v, first run's error %v", runs.Load(), concurrent, err)
	}
}
