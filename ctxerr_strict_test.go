package idemkit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// errTransient is the one error strictClassifier knows as transient.
var errTransient = errors.New("transient")

// strictClassifier calls every error it does not recognise permanent, as many users configure it.
func strictClassifier(err error) bool { return !errors.Is(err, errTransient) }

// TestContextErrorOfAnEndedWorkContextIsRetryable: a function that returns its context's error once
// the Guard's watchdog cancelled it (ErrLockLost: MaxHold ran out), or once its caller left, did not
// fail for the business: under an Options.IsPermanent calling every unknown error permanent, the key
// was recorded REJECTED and every retry got the replayed rejection, for good. It is now FAILED and a
// retry runs again.
func TestContextErrorOfAnEndedWorkContextIsRetryable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		watchdog bool
		ret      func(ctx context.Context) error
	}{
		{"watchdog, ctx.Err", true, func(ctx context.Context) error { return ctx.Err() }},
		{"watchdog, context.Cause", true, func(ctx context.Context) error { return context.Cause(ctx) }},
		{"caller left", false, func(ctx context.Context) error { return ctx.Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _, _, _ := realGuard(t, func(o *idemkit.Options) {
				o.Now = time.Now
				o.IsPermanent = strictClassifier
				o.Watchdog = tc.watchdog
				o.LockTTL, o.Lease, o.MaxHold = 30*time.Millisecond, 30*time.Millisecond, time.Millisecond
				if !tc.watchdog {
					o.LockTTL, o.Lease, o.MaxHold = time.Minute, time.Minute, 0
				}
			})
			call := idemkit.Call{Scope: "s", Key: "ctx-" + tc.name}
			ctx, cancel := context.WithCancel(ctxb)
			defer cancel()
			_, err := g.Do(ctx, call, func(ctx context.Context) ([]byte, error) {
				if !tc.watchdog {
					cancel()
				}
				<-ctx.Done()
				return nil, tc.ret(ctx)
			})
			if err == nil || errors.Is(err, idemkit.ErrRejected) {
				t.Fatalf("first call: %v, want the context's error", err)
			}
			rec, gerr := g.Get(ctxb, call.Scope, call.Key)
			if gerr != nil || rec.Status != idemkit.StatusFailed {
				t.Fatalf("record %+v, %v: want FAILED", rec, gerr)
			}
			ran := false
			if _, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) { ran = true; return []byte("ok"), nil }); err != nil || !ran {
				t.Fatalf("retry: %v, ran %v: want it run", err, ran)
			}
		})
	}
}
