package dtmmsg_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// TestReconcilerReportsAMessageDTMHasNoRecordOf: a message whose local transaction committed, and of
// which DTM has no record (a DTM store that lost it, or expired it: DTM's Redis store drops finished
// transactions after a day), can never be settled: its key stays in flight. The Reconciler passed
// over it silently, pass after pass; it reports it, as it reports a committed message DTM failed.
func TestReconcilerReportsAMessageDTMHasNoRecordOf(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	e.delivered(t, pub, "lost1", 3)
	r := &dtmmsg.Reconciler{Lifecycle: &hooks.Lifecycle{Guard: e.w.Guard}, Barrier: e.w.Barrier,
		Status: func(context.Context, string) (txstatus.Status, error) { return txstatus.Unknown, nil }, // DTM forgot it
		Pending: func(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error) {
			return e.w.Guard.Pending(ctx, now.Add(time.Hour), limit, chaosdtmmsg.Scope)
		}}
	n, err := r.RunOnce(ctxb, time.Now(), 10)
	if n != 0 || err == nil || !strings.Contains(err.Error(), "no record") {
		t.Fatalf("RunOnce = %d, %v; want an error naming the message DTM has no record of", n, err)
	}
	if rec, _ := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "lost1"); rec == nil || rec.Status != idemkit.StatusProcessing {
		t.Fatalf("record %+v; want it left PROCESSING (the message may or may not have been delivered)", rec)
	}
}
