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

// renewalFailingStore is a Store whose renewals fail as a database outage does: an Update that keeps
// a PROCESSING record PROCESSING under the same fence returns an error; every other call (a finish, a
// takeover) goes through.
type renewalFailingStore struct{ idemkit.Store }

func (s renewalFailingStore) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	if rec.Status == idemkit.StatusProcessing && prev.Status == idemkit.StatusProcessing && rec.Fence == prev.Fence {
		return errors.New("database unreachable")
	}
	return s.Store.Update(ctx, rec, prev)
}

// TestWatchdogCancelsBeforeTheLeaseLapses: when the watchdog cannot renew (the Store is down, or
// MaxHold has passed), it cancels the function's context before the claim can be taken over, so a
// duplicate sent the moment the function learns it lost its claim is still turned away. The watchdog
// cancelled only at its first tick after the hold had lapsed, when the lease had run out already: the
// duplicate took the key over and ran the business beside the function still running.
func TestWatchdogCancelsBeforeTheLeaseLapses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store idemkit.Store
		opts  idemkit.Options
	}{
		{"renewal failing", renewalFailingStore{memory.NewStore()}, idemkit.Options{Lease: 900 * time.Millisecond, Watchdog: true}},
		{"MaxHold passed", memory.NewStore(), idemkit.Options{Lease: 900 * time.Millisecond, Watchdog: true, MaxHold: time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.TTL = time.Minute
			g, err := idemkit.New(tc.store, &opts)
			if err != nil {
				t.Fatal(err)
			}
			call := idemkit.Call{Scope: "s", Key: "k"}
			var runs atomic.Int32
			var dupErr error
			_, err = g.Do(ctxb, call, func(ctx context.Context) ([]byte, error) {
				runs.Add(1)
				<-ctx.Done() // the watchdog gave up the claim: a duplicate now must not run
				_, dupErr = g.Do(ctxb, call, func(context.Context) ([]byte, error) {
					runs.Add(1)
					return []byte("second"), nil
				})
				return nil, context.Cause(ctx)
			})
			if !errors.Is(err, idemkit.ErrLockLost) {
				t.Errorf("the function's call answered %v, want ErrLockLost", err)
			}
			if runs.Load() != 1 || !errors.Is(dupErr, idemkit.ErrInFlight) {
				t.Errorf("%d runs; the duplicate sent when the function's context ended answered %v, want ErrInFlight", runs.Load(), dupErr)
			}
		})
	}
}
