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

// TestWatchdogOutlivesTheCaller: with the watchdog on, a function that goes on after its caller left
// (the client timed out, the function finishes what it started) keeps its claim until it returns: a
// retry with the key is in flight meanwhile, in Execute and Mark mode, with and without a Locker. The
// watchdog stopped renewing when the caller's context ended, the lease ran out under the running
// function, and the client's retry took the key over and ran it a second time, concurrently (found by
// a defect hunt).
func TestWatchdogOutlivesTheCaller(t *testing.T) {
	for _, mode := range []string{"Do", "Mark"} {
		for _, locker := range []bool{false, true} {
			opts := &idemkit.Options{Lease: 300 * time.Millisecond, TTL: 300 * time.Millisecond, Watchdog: true}
			if locker {
				opts.Locker = memory.NewLocker(nil)
			}
			g, err := idemkit.New(memory.NewStore(), opts)
			if err != nil {
				t.Fatal(err)
			}
			call := idemkit.Call{Scope: "s", Key: "k"}
			var running, runs atomic.Int32
			concurrent := false
			run := func(ctx context.Context, fn func(context.Context) error) error {
				if mode == "Mark" {
					return g.Mark(ctx, call, fn)
				}
				_, err := g.Do(ctx, call, func(ctx context.Context) ([]byte, error) { return []byte("v"), fn(ctx) })
				return err
			}
			started, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			callerCtx, leave := context.WithCancel(ctxb)
			go func() {
				done <- run(callerCtx, func(context.Context) error {
					runs.Add(1)
					running.Add(1)
					defer running.Add(-1)
					close(started)
					<-release // goes on whatever its context says
					return nil
				})
			}()
			select { // the function runs, its claim taken
			case <-started:
			case err := <-done:
				t.Fatalf("%s, Locker %v: the first call returned %v before its function ran", mode, locker, err)
			}
			leave() // the client gave up waiting
			var retryErrs []error
			for range 4 { // well past the lease
				time.Sleep(250 * time.Millisecond)
				retryErrs = append(retryErrs, run(ctxb, func(context.Context) error {
					runs.Add(1)
					if running.Load() > 0 {
						concurrent = true
					}
					return nil
				}))
			}
			close(release)
			err = <-done
			if concurrent || runs.Load() != 1 {
				t.Errorf("%s, Locker %v: %d runs for one key (concurrent: %v); the first run's answer %v, the retries' %v",
					mode, locker, runs.Load(), concurrent, err, retryErrs)
			}
			for _, rerr := range retryErrs {
				if !errors.Is(rerr, idemkit.ErrInFlight) && !errors.Is(rerr, idemkit.ErrDuplicate) {
					t.Errorf("%s, Locker %v: a retry while the first run went on: %v", mode, locker, rerr)
				}
			}
		}
	}
}
