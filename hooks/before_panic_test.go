package hooks_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// TestPanickingBeforeHookFreesTheKey: a BeforeTransaction hook that panics (a nil map in the user's
// code, a driver that panics) stops the transaction from starting, as a failing hook does. The panic
// went through Begin and Run with the record left PROCESSING with its gid and its lock held: every
// retry of the key got ErrInFlight until a Reconciler, after the lease, fenced a gid DTM never heard
// of — and for good without one. The record is now rolled back (FAILED, retryable: the key is free
// again) before the panic goes on with its value (found by a defect hunt).
func TestPanickingBeforeHookFreesTheKey(t *testing.T) {
	status := &txstatus.Client{Server: "http://127.0.0.1:1/api/dtmsvr"} // never asked: nothing starts
	for name, begin := range map[string]func(*hooks.Lifecycle, idemkit.Call){
		"Begin": func(l *hooks.Lifecycle, c idemkit.Call) { _, _, _ = l.Begin(ctxb, "saga", "gid-panic", c) },
		"Run": func(l *hooks.Lifecycle, c idemkit.Call) {
			_, _ = l.Run(ctxb, hooks.RunParams{TransType: "saga", Call: c, Status: status, Wait: time.Second,
				Start: func(context.Context, string) error { t.Error("Start called after a panicking Before hook"); return nil }})
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := setup(t)
			l := *b.lc
			l.Before = hooks.BeforeTransactionFunc(func(context.Context, *hooks.Txn) error { panic("nil map") })
			func() {
				defer func() {
					if v := recover(); v != "nil map" {
						t.Fatalf("recovered %v, want the hook's panic to go on", v)
					}
				}()
				begin(&l, call("k"))
			}()
			if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed {
				t.Fatalf("after a panicking Before hook the record is %s (gid %q), want FAILED: nothing started", rec.Status, rec.GID)
			}
			// The key is free: a retry, with the hook fixed, claims it at once (no lease to wait for).
			txn, _, err := b.lc.Begin(ctxb, "saga", "gid-retry", call("k"))
			if err != nil {
				t.Fatalf("retry after the panic: %v, want a new claim", err)
			}
			b.lc.Detach(ctxb, txn)
		})
	}
}
