package saga_test

import (
	"testing"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestWaitResultSagaStillRunningIsNotNeverStarted: Steps may set the saga's options, and
// dtmcli's s.WaitResult is one. DTM v1.19 then answers the submit 409 FAILURE when the saga has not
// succeeded inline — also for a saga still retrying a step (here the first action answers 425 while
// its lock is held). Submit takes that for DTM's refusal: the record is rolled back FAILED "never
// started" while the saga runs on and succeeds, and a retry with the same key starts a second saga:
// the transfer is made twice.
func TestWaitResultSagaStillRunningIsNotNeverStarted(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	c := newCall()
	gid := txstatus.NewGID()
	release := k.holdLock(t, gid, "01", "action")
	out, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, GID: gid, Result: []byte(`{"transfer":"done"}`),
		Steps: func(s *dtmcli.Saga) {
			k.addSteps(s)
			s.WaitResult = true
		}})
	rec := k.record(t, c)
	t.Logf("Submit = %+v, %v; record %s %q", out, err, rec.Status, rec.Error)
	release()
	if err := k.srv.ResetNextCronTime(ctxb, gid); err != nil {
		t.Fatal(err)
	}
	tr := waitTrans(t, k.srv, gid)
	t.Logf("saga %s: %s", gid, tr.Status)
	if rec.Status == idemkit.StatusFailed && tr.Status == dtmcli.StatusSucceed {
		t.Errorf("the record was rolled back (%q) while the saga ran on and succeeded", rec.Error)
	}
	again, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte(`{"transfer":"again"}`)})
	t.Logf("retry = %+v, %v", again, err)
	if again.GID != "" {
		waitTrans(t, k.srv, again.GID)
	}
	if n := k.runsOf("/TransOut"); n != 1 {
		t.Fatalf("TransOut ran %d times for one key", n)
	}
}
