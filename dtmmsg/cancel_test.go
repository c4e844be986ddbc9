package dtmmsg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// TestCallerGoneInLocalIsSettledAtOnce: the caller goes away inside the local transaction, whose
// commit then fails with the cancellation (database/sql rolls it back): nothing committed. Publish
// asked the barrier whether it had committed with the caller's ended context, which could not ask,
// and left the record PROCESSING with "outcome unknown": the key was in flight, and the message
// prepared at DTM, until the back-check and a Reconciler came by. The question (which fences the
// local transaction) outlives the caller: the record is FAILED at once and the key free again.
func TestCallerGoneInLocalIsSettledAtOnce(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 20*time.Second)
	ctx, cancel := context.WithCancel(ctxb)
	defer cancel()
	out, err := e.w.PublishOrder(ctx, pub, e.svc, "gone-in-local", 3, cancel)
	if !errors.Is(err, dtmmsg.ErrLocalFailed) || out.Status != txstatus.Failed {
		t.Fatalf("Publish = %+v, %v; want the local transaction reported rolled back", out, err)
	}
	rec, gerr := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "gone-in-local")
	if gerr != nil {
		t.Fatal(gerr)
	}
	if rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s, want FAILED: nothing committed, the key is free again", rec.Status)
	}
	if n := e.count(t, e.w.Tables.Orders, "idem_key = ?", "gone-in-local"); n != 0 {
		t.Fatalf("%d orders committed", n)
	}
	// A retry publishes.
	again, err := e.w.PublishOrder(ctxb, pub, e.svc, "gone-in-local", 3, nil)
	if err != nil || again.Status != txstatus.Succeed {
		t.Fatalf("retry = %+v, %v", again, err)
	}
}
