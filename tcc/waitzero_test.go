package tcc_test

import (
	"errors"
	"testing"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/txstatus"
)

// TestWaitZeroAbortedTryIsNotReportedSubmitted: with Wait 0 (Global.Wait's default), a try that
// fails permanently makes Run abort the TCC. Run asked DTM after the failed start, yet it reported
// Status Submitted and the success Result ("confirming: <result>" in the README's switch) for a TCC
// it had aborted (found by a defect hunt). It reports the status DTM gave, without a result; with
// Wait 0 the record stays PROCESSING for the Reconciler, as documented.
func TestWaitZeroAbortedTryIsNotReportedSubmitted(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	g := *k.global
	g.Wait = 0
	c := newCall()
	p := k.runParams(c)
	errBlocked := errors.New("customer blocked")
	p.Tries = func(tc *dtmcli.Tcc) error {
		if _, err := tc.CallBranch(&transfer{Amount: amount}, k.svc.URL+"/OutTry", k.svc.URL+"/OutConfirm", k.svc.URL+"/OutCancel"); err != nil {
			return err
		}
		return idemkit.Permanent(errBlocked)
	}
	out, err := (&g).Run(ctxb, p)
	t.Logf("Run = %+v, err %v; record %s", out, err, k.record(t, c).Status)
	if out.Status == txstatus.Submitted || out.Result != nil {
		t.Errorf("an aborted TCC is reported as Status %q with the success Result %q (Outcome: Result only unless it rolled back)", out.Status, out.Result)
	}
	if out.Status.Final() && out.Status != txstatus.Failed {
		t.Errorf("status %q for an aborted TCC", out.Status)
	}
	if !errors.Is(out.Reason, errBlocked) {
		t.Errorf("Reason %v: want the try's error", out.Reason)
	}
	if out.Status == txstatus.Failed {
		var rej *idemkit.RejectedError
		if !errors.As(err, &rej) {
			t.Errorf("Run's error %v: want the *idemkit.RejectedError a replay returns (tcc.Global.Run doc)", err)
		}
	} else if err != nil || k.record(t, c).Status != idemkit.StatusProcessing {
		t.Errorf("Run's error %v, record %s: want nil and PROCESSING (Wait 0 leaves it to the Reconciler)", err, k.record(t, c).Status)
	}
}
