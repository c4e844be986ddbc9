package idemkit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// watch keeps the claim alive while its function runs: every third of the shorter of LockTTL and Lease
// it calls Extend, until Options.MaxHold has passed since the claim. When the claim is lost, or the hold
// is about to lapse (renewals failing, MaxHold passed, or a tick that came too late to renew), the
// returned context is cancelled with ErrLockLost as its cause, saying which — half a period before the
// lease the last renewal gave runs out, so that the function learns it lost its claim while
// duplicates are still turned away. The renewals go on
// until stop, even once parent ended: a function that goes on after its caller left (finishing what it
// started) would otherwise lose its claim to the caller's retry, which would run the work again beside
// it. stop ends the watchdog and waits for it, so nothing is renewed after it returns.
func (cl *Claim) watch(parent context.Context) (ctx context.Context, stop func()) {
	g := cl.g
	ctx, cancel := context.WithCancelCause(parent)
	period := g.opts.LockTTL
	if cl.mode == ModeExecute || cl.mode == ModeMark {
		period = min(period, g.opts.Lease) // renewals move the record's lease or a mark's expiry
	}
	// A third of it, however short: New refuses a Lease or LockTTL under 1ms, so the period is never
	// zero, and a longer floor would renew no sooner than a lease under three of it lapses.
	period /= 3
	started := g.opts.Now()
	// giveUp is when the watchdog cancels unless a renewal moved it: half a period before the claim,
	// last renewed (or taken) before then, may be taken over. The claim's write may have taken a while
	// (up to a third of the lease: see Claim.landed), and its lease counts from before it: the first
	// give-up comes half a period before the lease (a mark's expiry) the claim has.
	giveUp := started.Add(period*3 - period/2)
	switch {
	case cl.callerTx:
	case cl.mode == ModeExecute:
		giveUp = minTime(giveUp, cl.rec.LeaseUntil.Add(-period/2))
	case cl.mode == ModeMark && !cl.rec.ExpiresAt.IsZero():
		giveUp = minTime(giveUp, cl.rec.ExpiresAt.Add(-period/2))
	}
	stopc, done := make(chan struct{}), make(chan struct{})
	renewing := context.WithoutCancel(ctx) // the function may outlive its caller: renew until stop
	var failing error                      // the last renewal's error, nil once one succeeds
	go func() {
		defer close(done)
		t := time.NewTimer(period)
		defer t.Stop()
		for {
			select {
			case <-stopc:
				return
			case <-t.C:
			}
			ticked, now := time.Now(), g.opts.Now()
			left := giveUp.Sub(now)
			if left <= 0 {
				switch {
				case failing != nil:
					cancel(fmt.Errorf("%w: renewal failing: %w", ErrLockLost, failing))
				case now.Sub(started) >= g.opts.MaxHold:
					cancel(fmt.Errorf("%w: held longer than MaxHold (%s)", ErrLockLost, g.opts.MaxHold))
				default:
					// No renewal failed and MaxHold is not reached: this tick came too late to renew
					// (the process starved the watchdog, the clock jumped, the claim's write took long).
					cancel(fmt.Errorf("%w: not renewed in time: the watchdog ran %s past its time to give the claim up (the process stalled, or the clock jumped)",
						ErrLockLost, -left))
				}
				return
			}
			if now.Sub(started) >= g.opts.MaxHold {
				t.Reset(left) // no more renewals: give up in time
				continue
			}
			err := cl.renewBy(renewing, min(period, left), left, stopc, func() {
				// The renewal did not return by the time to give the claim up (on SQLite a write
				// waits the whole busy timeout for another connection's lock, whatever its context
				// says): the lease it was to move may lapse before it lands.
				cancel(fmt.Errorf("%w: renewal not answered in time: still waiting after %s", ErrLockLost, left))
			})
			switch {
			case errors.Is(err, errWatchEnded):
				return
			case err == nil:
				failing = nil
				giveUp = now.Add(period*3 - period/2)
				t.Reset(max(period-time.Since(ticked), 0)) // keep the cadence, however long Extend took
			case errors.Is(err, ErrLockNotHeld), errors.Is(err, ErrFenced):
				cancel(fmt.Errorf("%w: %w", ErrLockLost, err))
				return
			default:
				failing = err
				g.opts.Logger.WarnContext(renewing, "idemkit: watchdog renewal failed, retrying", "error", err)
				t.Reset(max(min(period, giveUp.Sub(g.opts.Now())), 0))
			}
		}
	}()
	return ctx, func() {
		close(stopc)
		<-done
		cancel(nil)
	}
}

// errWatchEnded is renewBy's error when the watchdog gave up or was stopped while a renewal ran.
var errWatchEnded = errors.New("idemkit: watchdog ended")

// renewBy extends the claim on a context ending after timeout, and waits for it until giveUp has
// passed — then it calls giveUpNow first — or stopc is closed, whichever comes first: a renewal that
// outlives its context (a driver that does not see it, such as SQLite's busy handler) must not keep
// the watchdog from giving the claim up in time. It returns the renewal's error, or errWatchEnded when
// it gave up or was stopped before the renewal returned; the renewal has returned either way, so
// nothing is renewed after the watchdog ends.
func (cl *Claim) renewBy(ctx context.Context, timeout, giveUp time.Duration, stopc <-chan struct{}, giveUpNow func()) error {
	ectx, ecancel := context.WithTimeout(ctx, timeout)
	defer ecancel()
	res := make(chan error, 1)
	go func() { res <- cl.Extend(ectx) }()
	t := time.NewTimer(giveUp)
	defer t.Stop()
	select {
	case err := <-res:
		return err
	case <-t.C:
		giveUpNow()
	case <-stopc:
	}
	<-res
	return errWatchEnded
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
