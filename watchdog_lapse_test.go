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
			gaveUpBeforeDuplicate(t, g, g)
		})
	}
}

// renewalsFailAfter is a Store whose renewals (see renewalFailingStore) succeed ok times, then fail.
type renewalsFailAfter struct {
	idemkit.Store
	ok atomic.Int32
}

func (s *renewalsFailAfter) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	if rec.Status == idemkit.StatusProcessing && prev.Status == idemkit.StatusProcessing && rec.Fence == prev.Fence && s.ok.Add(-1) < 0 {
		return errors.New("database unreachable")
	}
	return s.Store.Update(ctx, rec, prev)
}

// TestWatchdogTinyLease: New accepts a Lease (and LockTTL) of 1ms and more, but the watchdog renewed
// at least a millisecond apart, its period a third of the lease or 1ms, whichever is longer, and gave
// a renewed claim up two and a half periods after the renewal: under 3ms that was after the lease it
// renewed had lapsed, so when renewals began to fail it cancelled the function only once a duplicate
// could take the key over and run beside it (and under 1.5ms it renewed no sooner than the lease
// lapsed). The Guards' clock here runs a thousand times slower than the timers, so that the 2ms lease
// lasts two seconds of the test's time and scheduling delays cannot decide the outcome.
func TestWatchdogTinyLease(t *testing.T) {
	start := time.Now()
	slow := func() time.Time { return start.Add(time.Since(start) / 1000) }
	const lease = 2 * time.Millisecond
	base := memory.NewStore()
	st := &renewalsFailAfter{Store: base}
	st.ok.Store(3)
	g, err := idemkit.New(st, &idemkit.Options{Lease: lease, Watchdog: true, Now: slow})
	if err != nil {
		t.Fatal(err)
	}
	dup, err := idemkit.New(base, &idemkit.Options{Lease: lease, Now: slow})
	if err != nil {
		t.Fatal(err)
	}
	gaveUpBeforeDuplicate(t, g, dup)
}

// gaveUpBeforeDuplicate runs a call on g whose function waits until the watchdog gives its claim up,
// then sends a duplicate through dup (g itself, or a Guard of another process on the same Store): the
// duplicate must be answered in flight, not run, and g's call ErrLockLost.
func gaveUpBeforeDuplicate(t *testing.T, g, dup *idemkit.Guard) {
	t.Helper()
	call := idemkit.Call{Scope: "s", Key: "k"}
	var runs atomic.Int32
	var dupErr error
	_, err := g.Do(ctxb, call, func(ctx context.Context) ([]byte, error) {
		runs.Add(1)
		select {
		case <-ctx.Done(): // the watchdog gave up the claim: a duplicate now must not run
		case <-time.After(20 * time.Second):
			t.Error("the watchdog did not cancel the function within 20s")
			return nil, errors.New("not cancelled")
		}
		_, dupErr = dup.Do(ctxb, call, func(context.Context) ([]byte, error) {
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
}
