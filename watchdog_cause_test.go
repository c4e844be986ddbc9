package idemkit_test

import (
	"context"
	"errors"
	"fmt"
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

// TestWatchdogGiveUpReachesTheCaller: a function the watchdog cancelled that returns its context's
// error, as Go code does (ctx.Err(), or a driver's "context canceled"), answered the caller with a bare
// context.Canceled although the caller cancelled nothing: nothing said the claim was given up. The
// answer now matches ErrLockLost with the watchdog's reason, and still context.Canceled, in each mode.
func TestWatchdogGiveUpReachesTheCaller(t *testing.T) {
	for _, mode := range []string{"Do", "Mark", "Tx", "TxMark", "DoTx", "MarkTx"} {
		t.Run(mode, func(t *testing.T) {
			s := memory.NewStore()
			g, err := idemkit.New(s, &idemkit.Options{Lease: time.Second, Watchdog: true, MaxHold: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			call := idemkit.Call{Scope: "s", Key: "k"}
			fn := func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(10 * time.Second):
					return errors.New("the watchdog never gave up")
				}
			}
			vfn := func(ctx context.Context) ([]byte, error) { return nil, fn(ctx) }
			switch mode {
			case "Do":
				_, err = g.Do(ctxb, call, vfn)
			case "Mark":
				err = g.Mark(ctxb, call, fn)
			case "Tx":
				_, err = g.Tx(ctxb, s, call, func(ctx context.Context, _ idemkit.TxStore) ([]byte, error) { return vfn(ctx) })
			case "TxMark":
				err = g.TxMark(ctxb, s, call, func(ctx context.Context, _ idemkit.TxStore) error { return fn(ctx) })
			case "DoTx", "MarkTx":
				tx, berr := s.BeginTx(ctxb)
				if berr != nil {
					t.Fatal(berr)
				}
				if mode == "DoTx" {
					_, err = g.DoTx(ctxb, tx, call, vfn)
				} else {
					err = g.MarkTx(ctxb, tx, call, fn)
				}
				_ = tx.Rollback()
			}
			if !errors.Is(err, idemkit.ErrLockLost) || !errors.Is(err, context.Canceled) || !strings.Contains(fmt.Sprint(err), "MaxHold") {
				t.Fatalf("%s answered %v; want ErrLockLost saying why (MaxHold), and context.Canceled", mode, err)
			}
		})
	}
}
