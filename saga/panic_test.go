package saga_test

import (
	"testing"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/saga"
)

// TestPanickingStepsFreeTheKey: a panic in Steps (dtmcli's Saga.Add panics on a payload it cannot
// marshal) left the record PROCESSING with its gid, the key in flight to every retry until a
// Reconciler settled it, although nothing had been sent to DTM. The record is now rolled back (the
// key free again, the Rollback hook run) and the panic goes on with its value (found by a defect
// hunt).
func TestPanickingStepsFreeTheKey(t *testing.T) {
	k := newBank(t, nil)
	call := newCall()
	boom := func(s *dtmcli.Saga) { s.Add(k.svc.URL+"/TransOut", k.svc.URL+"/TransOutCompensate", make(chan int)) }
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Submit returned; want Steps' panic to go on")
			}
		}()
		_, _ = k.init.Submit(ctxb, saga.SubmitParams{Call: call, Steps: boom})
	}()
	rec := k.record(t, call)
	if rec.Status != idemkit.StatusFailed {
		t.Fatalf("record after the panic: %s (gid %q), want FAILED: the key free again", rec.Status, rec.GID)
	}
	out, err := k.init.Submit(ctxb, saga.SubmitParams{Call: call, Steps: k.addSteps})
	if err != nil || out.Replayed {
		t.Fatalf("retry: %+v %v", out, err)
	}
}
