package dtmmsg_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// TestCancelledPublisherStillSettles: Publish waits for the outcome on a context that survives the
// caller's cancellation, and the Commit hook and the record follow that outcome on one too: a caller
// gone after the local transaction still gets a SUCCEEDED record and a hook that ran.
func TestCancelledPublisherStillSettles(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 20*time.Second)
	var hookErr error
	pub.Lifecycle.OnCommit = hooks.CommitFunc(func(ctx context.Context, _ *hooks.Txn, _ []byte) error {
		hookErr = ctx.Err() // a hook doing database work with ctx fails the same way
		return hookErr
	})
	ctx, cancel := context.WithCancel(ctxb)
	// the client goes away shortly after the local transaction, while Publish waits for the outcome
	out, err := e.w.PublishOrder(ctx, pub, e.svc, "cancelled-caller", 3, func() { time.AfterFunc(30*time.Millisecond, cancel) })
	if out.Status != txstatus.Succeed {
		t.Fatalf("Publish = %+v, %v", out, err)
	}
	rec, gerr := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "cancelled-caller")
	if gerr != nil {
		t.Fatal(gerr)
	}
	if rec.Status != idemkit.StatusSucceeded || hookErr != nil || err != nil {
		t.Fatalf("message succeeded and Publish saw it, but record %s, hook ctx %v, err %v", rec.Status, hookErr, err)
	}
}
