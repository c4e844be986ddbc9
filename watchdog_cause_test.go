package idemkit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
)

// TestWatchdogGiveUpCauseSaysWhy: the watchdog gives the claim up when its give-up time passes: its
// renewals failing, MaxHold reached, or — renewals never failing — its tick came too late to renew (the
// process starved it, the clock jumped). The last said "held longer than MaxHold (10m0s)" although the
// claim had been held for seconds. The cause now says what happened in each case.
func TestWatchdogGiveUpCauseSaysWhy(t *testing.T) {
	const lease = 300 * time.Millisecond
	for _, tc := range []struct {
		name    string
		store   idemkit.Store
		maxHold time.Duration
		// jump, when set, moves the Guard's clock past the lease as the function starts, before the
		// watchdog's first tick: to the watchdog, a tick that came a whole lease late.
		jump    bool
		want    string
		wantNot string
	}{
		{name: "tick came late", store: memory.NewStore(), jump: true, want: "not renewed in time", wantNot: "MaxHold"},
		{name: "MaxHold passed", store: memory.NewStore(), maxHold: time.Millisecond, want: "held longer than MaxHold (1ms)"},
		{name: "renewal failing", store: renewalFailingStore{memory.NewStore()}, want: "renewal failing: database unreachable", wantNot: "MaxHold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := idemtest.NewClock()
			g, err := idemkit.New(tc.store, &idemkit.Options{Lease: lease, TTL: time.Hour, Watchdog: true, MaxHold: tc.maxHold, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.jump {
				// The renewals and the give-up are timed by the Guard's clock: keep it going.
				stop := make(chan struct{})
				defer close(stop)
				go func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(5 * time.Millisecond):
							clk.Advance(5 * time.Millisecond)
						}
					}
				}()
			}
			var cause error
			_, err = g.Do(ctxb, idemkit.Call{Scope: "s", Key: "k"}, func(ctx context.Context) ([]byte, error) {
				if tc.jump {
					clk.Advance(2 * lease)
				}
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
					return nil, errors.New("the watchdog never gave up")
				}
				cause = context.Cause(ctx)
				return nil, cause
			})
			if !errors.Is(err, idemkit.ErrLockLost) || !errors.Is(cause, idemkit.ErrLockLost) {
				t.Fatalf("call: %v (cause %v), want ErrLockLost", err, cause)
			}
			if msg := cause.Error(); !strings.Contains(msg, tc.want) || tc.wantNot != "" && strings.Contains(msg, tc.wantNot) {
				t.Fatalf("cause %q: want it to say %q (and not %q)", msg, tc.want, tc.wantNot)
			}
		})
	}
}
