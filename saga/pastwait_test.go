package saga_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestRollingBackPastWaitIsLeftToTheReconciler: a saga rolls back, and its compensation is still being
// retried when Wait runs out. Submit reports Aborting without a result (the step's refusal as the
// reason) and no error; the record stays PROCESSING, so a duplicate is in flight; once the compensation
// went through, the reconciler records FAILED, and a retry of the key runs a new saga, whose money
// moves once.
func TestRollingBackPastWaitIsLeftToTheReconciler(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	k.setFrozen(t, transIn, true)
	c := newCall()
	gid := txstatus.NewGID()
	release := k.holdLock(t, gid, "01", "compensate")
	init := *k.init
	init.Wait = 3 * time.Second
	out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, GID: gid, Steps: k.addSteps, Result: []byte("R")})
	if err != nil || out.Status != txstatus.Aborting || out.Result != nil || !errors.Is(out.Reason, hooks.ErrRolledBack) {
		t.Fatalf("out = %+v, %v", out, err)
	}
	if _, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte("R")}); !errors.Is(err, idemkit.ErrInFlight) {
		t.Fatalf("dup = %v", err)
	}
	release()
	waitTrans(t, k.srv, gid)
	if n, ev := k.reconcileLate(t); n != 1 {
		t.Fatalf("reconciler %d %+v", n, ev)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s %q, want FAILED", rec.Status, rec.Error)
	}
	k.setFrozen(t, transIn, false)
	again, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte("R")})
	if err != nil || again.Status != txstatus.Succeed {
		t.Fatalf("again = %+v, %v", again, err)
	}
	k.checkBalances(t, amount)
}

// TestKeyReusedForAnotherPayloadWhileTheSagaRuns: while a key's saga runs (a step held by a concurrent
// delivery's lock), a call with another fingerprint gets ErrPayloadMismatch and one without a
// fingerprint ErrInFlight; once it succeeded, the other payload still gets ErrPayloadMismatch. Nothing
// of theirs is submitted: the money moves once.
func TestKeyReusedForAnotherPayloadWhileTheSagaRuns(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	c := newCall()
	c.Fingerprint = "fp-a"
	gid := txstatus.NewGID()
	release := k.holdLock(t, gid, "01", "action")
	done := make(chan error, 1)
	go func() {
		_, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, GID: gid, Steps: k.addSteps, Result: []byte("R")})
		done <- err
	}()
	waitFor(t, "the saga at DTM", func() bool { tr, _ := k.srv.Query(ctxb, gid); return tr != nil && tr.Status != "" })
	c2 := c
	c2.Fingerprint = "fp-b"
	if _, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c2, Steps: k.addSteps, Result: []byte("R")}); !errors.Is(err, idemkit.ErrPayloadMismatch) {
		t.Errorf("mismatch in flight = %v", err)
	}
	c3 := c
	c3.Fingerprint = ""
	if _, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c3, Steps: k.addSteps, Result: []byte("R")}); !errors.Is(err, idemkit.ErrInFlight) {
		t.Errorf("no fingerprint in flight = %v", err)
	}
	release()
	if err := wait(t, "submit", done); err != nil {
		t.Fatal(err)
	}
	if _, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c2, Steps: k.addSteps, Result: []byte("R")}); !errors.Is(err, idemkit.ErrPayloadMismatch) {
		t.Errorf("mismatch after = %v", err)
	}
	k.checkBalances(t, amount)
}
