package saga_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// errTransient is the one error strictClassifier knows as transient.
var errTransient = errors.New("transient")

// strictClassifier calls every error it does not recognise permanent, as many users configure it.
func strictClassifier(err error) bool { return !errors.Is(err, errTransient) }

// retryRunsANewSaga checks that c's saga rolled back FAILED (its account frozen), then unfreezes the
// account and checks that a retry of c runs a new saga, which succeeds.
func (k *bank) retryRunsANewSaga(t *testing.T, c idemkit.Call) {
	t.Helper()
	if rec := k.record(t, c); rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s %q, want FAILED", rec.Status, rec.Error)
	}
	k.setFrozen(t, transIn, false)
	again, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte("ok")})
	if err != nil || again.Replayed || again.Status != txstatus.Succeed {
		t.Fatalf("retry = %+v, %v: want a new saga", again, err)
	}
}

// TestRollbackReasonsStayRetryableUnderAStrictClassifier: the rollback reasons hooks makes itself — a
// saga DTM rolled back (its rollback reason), Lifecycle.Conclude's ErrRolledBack, a Reconciler's
// rollback of a gid it fenced — say "the key may run again" (a step's failure is never REJECTED). Under an
// Options.IsPermanent calling every unknown error permanent they were recorded REJECTED, and every retry
// of the key got the replayed rejection instead of a new saga.
func TestRollbackReasonsStayRetryableUnderAStrictClassifier(t *testing.T) {
	k := newBank(t, nil)
	var err error
	if k.guard, err = idemkit.New(k.store, &idemkit.Options{Locker: k.locker, Lease: 5 * time.Second, IsPermanent: strictClassifier}); err != nil {
		t.Fatal(err)
	}
	k.lc.Guard = k.guard

	t.Run("saga rolled back", func(t *testing.T) {
		k.setFrozen(t, transIn, true)
		c := newCall()
		out, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte("ok")})
		if err != nil || out.Status != txstatus.Failed {
			t.Fatalf("Submit = %+v, %v", out, err)
		}
		k.retryRunsANewSaga(t, c)
	})

	t.Run("submit answered by a gateway, saga rolled back", func(t *testing.T) {
		// The gateway forwards the submit and answers 502: Submit asks DTM, which runs the saga,
		// and it rolls back. The gateway's error is DTM's answer, not the business's.
		k.setFrozen(t, transIn, true)
		p := dtmserver.NewProxy(t, k.srv, onPost("submit", dtmserver.ProxyAction{Status: 502}, nil))
		c := newCall()
		out, err := k.via(p.URL()).Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte("ok")})
		if out.Status != txstatus.Failed || errors.Is(err, idemkit.ErrRejected) {
			t.Fatalf("Submit = %+v, %v", out, err)
		}
		k.retryRunsANewSaga(t, c)
	})

	t.Run("Conclude Failed", func(t *testing.T) {
		c := newCall()
		txn, _, err := k.lc.Begin(ctxb, "saga", txstatus.NewGID(), c)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.lc.Conclude(ctxb, txn, txstatus.Failed, nil); err != nil {
			t.Fatal(err)
		}
		if rec := k.record(t, c); rec.Status != idemkit.StatusFailed {
			t.Fatalf("record %s %q, want FAILED", rec.Status, rec.Error)
		}
	})

	t.Run("reconciler fenced an unknown gid", func(t *testing.T) {
		c := newCall()
		txn, _, err := k.lc.Begin(ctxb, "saga", txstatus.NewGID(), c)
		if err != nil {
			t.Fatal(err)
		}
		k.lc.Detach(ctxb, txn) // the initiator dies before its submit
		rc := &hooks.Reconciler{Lifecycle: k.lc, Scopes: []string{c.Scope}, Manager: &txstatus.Client{Server: k.srv.URL()}, TransType: "saga"}
		if _, err := rc.RunOnce(ctxb, time.Now().Add(time.Hour), 100); err != nil {
			t.Fatal(err)
		}
		if tr := waitTrans(t, k.srv, txn.GID); tr.Status != dtmcli.StatusFailed {
			t.Fatalf("fenced gid %s", tr.Status)
		}
		if rec := k.record(t, c); rec.Status != idemkit.StatusFailed {
			t.Fatalf("record %s %q, want FAILED", rec.Status, rec.Error)
		}
	})
}
