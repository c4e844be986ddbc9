package hooks_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// TestReconcilerReportsAStatusItDoesNotKnow: a Manager (the interface is the user's to implement, over
// DTM's gRPC API for one) that reports a status outside DTM's — "ABORTED", a translation's mistake, a
// newer DTM's — had its record taken for a transaction still running: passed over, pass after pass,
// with no error, no log line and no event error, the key in flight for ever and nothing telling an
// operator. Such a record is reported (RunOnce's error, the log, ReconcileEvent.Err) and left
// PROCESSING.
func TestReconcilerReportsAStatusItDoesNotKnow(t *testing.T) {
	b := setup(t)
	txn, _, err := b.lc.Begin(ctxb, "saga", "g-odd", call("k"))
	if err != nil {
		t.Fatal(err)
	}
	b.lc.Detach(ctxb, txn)
	b.clock.Advance(2 * time.Second) // past the lease
	var logs strings.Builder
	var events []hooks.ReconcileEvent
	r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, TransType: "saga",
		Manager: &fakeManager{statuses: map[string]txstatus.Status{"g-odd": "ABORTED"}},
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		Observe: func(_ context.Context, e *hooks.ReconcileEvent) { events = append(events, *e) }}
	n, err := r.RunOnce(ctxb, b.clock.Now(), 10)
	if rec := b.status(t, "k"); n != 0 || rec.Status != idemkit.StatusProcessing {
		t.Fatalf("RunOnce = %d (record %s); want nothing settled", n, rec.Status)
	}
	if err == nil || !strings.Contains(err.Error(), "ABORTED") || !strings.Contains(logs.String(), "g-odd") ||
		len(events) != 1 || events[0].Err == nil {
		t.Fatalf("RunOnce error %v, log %q, events %+v; want the record whose status the reconciler does not know reported", err, logs.String(), events)
	}
}
