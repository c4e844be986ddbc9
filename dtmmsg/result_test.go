package dtmmsg_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/txstatus"
)

// TestPublishFirstCallResult: Outcome.Result is, on a first call, the bytes every replay returns
// (hooks.Outcome); Publish left it nil on the first call of a message that succeeded (found by a
// defect hunt).
func TestPublishFirstCallResult(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 20*time.Second)
	out, err := e.w.PublishOrder(ctxb, pub, e.svc, "q1", 3, nil)
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("publish: %+v %v", out, err)
	}
	dup, err := e.w.PublishOrder(ctxb, pub, e.svc, "q1", 3, nil)
	if err != nil || !dup.Replayed {
		t.Fatalf("replay: %+v %v", dup, err)
	}
	if len(out.Result) == 0 || string(out.Result) != string(dup.Result) {
		t.Errorf("first call's Result %q, replay's %q", out.Result, dup.Result)
	}
}
