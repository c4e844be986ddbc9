package idemkit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// watch keeps the claim alive while its function runs: every third of the shorter of LockTTL and Lease
// it calls Extend, until Options.MaxHold has passed since the claim. When the claim is lost, or the hold
// lapses, the returned context is cancelled with ErrLockLost as its cause. The renewals go on until
// stop, even once parent ended: a function that goes on after its caller left (finishing what it
// started) would otherwise lose its claim to the caller's retry, which would run the work again beside
// it. stop ends the watchdog and waits for it, so nothing is renewed after it returns.
func (cl *Claim) watch(parent context.Context) (ctx context.Context, stop func()) {
	g := cl.g
	ctx, cancel := context.WithCancelCause(parent)
	period := g.opts.LockTTL
	if cl.mode == ModeExecute || cl.mode == ModeMark {
		period = min(period, g.opts.Lease) // renewals move the record's lease or a mark's expiry
	}
	period = max(period/3, time.Millisecond)
	started := g.opts.Now()
	holdUntil := started.Add(period * 3) // the claim is safe until then without renewal
	stopc, done := make(chan struct{}), make(chan struct{})
	renewing := context.WithoutCancel(ctx) // the function may outlive its caller: renew until stop
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-stopc:
				return
			case <-t.C:
			}
			now := g.opts.Now()
			if now.Sub(started) >= g.opts.MaxHold {
				if !now.Before(holdUntil) {
					cancel(fmt.Errorf("%w: held longer than MaxHold (%s)", ErrLockLost, g.opts.MaxHold))
					return
				}
				continue
			}
			ectx, ecancel := context.WithTimeout(renewing, period)
			err := cl.Extend(ectx)
			ecancel()
			switch {
			case err == nil:
				holdUntil = now.Add(period * 3)
			case errors.Is(err, ErrLockNotHeld), errors.Is(err, ErrFenced):
				cancel(fmt.Errorf("%w: %w", ErrLockLost, err))
				return
			case !g.opts.Now().Before(holdUntil):
				cancel(fmt.Errorf("%w: renewal failing: %w", ErrLockLost, err))
				return
			default:
				g.opts.Logger.WarnContext(renewing, "idemkit: watchdog renewal failed, retrying", "error", err)
			}
		}
	}()
	return ctx, func() {
		close(stopc)
		<-done
		cancel(nil)
	}
}
