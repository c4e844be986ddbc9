package saga_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/sweep"
	"github.com/idemkit/idemkit/txstatus"
)

// TestSagaInFlightBranchIsRetried: the first action's lock is held by a concurrent "redelivery", so
// DTM's calls get 425 ONGOING. DTM keeps the saga submitted and calls again at its retry interval; once
// the lock is free the step runs once and the saga succeeds — it is never rolled back. The initiator's
// record follows: SUCCEEDED with the result, and the order is PAID.
func TestSagaInFlightBranchIsRetried(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	c := newCall()
	type submitted struct {
		out hooks.Outcome
		err error
	}
	done := make(chan submitted, 1)
	gids := make(chan string, 1)
	locked := make(chan struct{})
	go func() {
		out, err := k.init.Submit(ctxb, saga.SubmitParams{
			Call:   c,
			Result: []byte(`{"transfer":"done"}`),
			Steps: func(s *dtmcli.Saga) {
				gids <- s.Gid
				<-locked // the "redelivery" holds the first action before the saga is submitted
				k.addSteps(s)
			},
		})
		done <- submitted{out, err}
	}()
	gid := <-gids
	release := k.holdLock(t, gid, "01", "action")
	close(locked)
	waitFor(t, "two in-flight answers to the first action", func() bool { return k.count(gid, "01 action:425:-") >= 2 })
	if rec := k.record(t, c); rec.Status != idemkit.StatusProcessing || rec.GID != gid {
		t.Fatalf("record while the saga runs: %s gid %q", rec.Status, rec.GID)
	}
	release()
	if err := k.srv.ResetNextCronTime(ctxb, gid); err != nil {
		t.Fatal(err)
	}

	var res submitted
	select {
	case res = <-done:
	case <-time.After(settleTimeout + 5*time.Second):
		t.Fatal("Submit did not return")
	}
	if res.err != nil || res.out.Status != txstatus.Succeed || res.out.GID != gid {
		t.Fatalf("Submit = %+v, %v", res.out, res.err)
	}
	tr := waitTrans(t, k.srv, gid)
	if tr.Status != dtmcli.StatusSucceed {
		t.Fatalf("saga %s: %s", gid, tr.Status)
	}
	ev := k.eventsOf(gid)
	if !slices.Contains(ev, "01 action:200:proceed") || !slices.Contains(ev, "02 action:200:proceed") ||
		slices.ContainsFunc(ev, func(s string) bool { return strings.Contains(s, " compensate:") }) {
		t.Fatalf("branch calls %q: want the actions retried to success and no compensation", ev)
	}
	if k.runsOf("/TransOut") != 1 || k.runsOf("/TransIn") != 1 {
		t.Fatalf("actions ran %d and %d times", k.runsOf("/TransOut"), k.runsOf("/TransIn"))
	}
	k.checkBalances(t, amount)
	rec := k.record(t, c)
	if rec.Status != idemkit.StatusSucceeded || string(rec.Response) != `{"transfer":"done"}` {
		t.Fatalf("record %s %q", rec.Status, rec.Response)
	}
	if st := k.orderStatus(t, gid); st != "PAID" {
		t.Fatalf("order %s", st)
	}

	// A duplicate of the finished key replays the result and submits nothing.
	out, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: func(*dtmcli.Saga) { t.Error("a replay built a saga") }})
	if err != nil || !out.Replayed || out.GID != "" || string(out.Result) != `{"transfer":"done"}` {
		t.Fatalf("duplicate: %+v, %v", out, err)
	}
}

// TestSagaPermanentFailureIsCompensated: the second action fails permanently (the account is frozen):
// 409, DTM rolls the saga back, the first step is compensated and the failed step's compensation is a
// null compensation. The record is FAILED, the order CANCELLED, and a retry with the same key (after
// the account is unfrozen) starts a new saga that succeeds. Runs with and without gorm's PrepareStmt.
func TestSagaPermanentFailureIsCompensated(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		cfg  *gorm.Config
	}{{"default", nil}, {"PrepareStmt", &gorm.Config{Logger: logger.Discard, PrepareStmt: true}}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			k := newBank(t, mode.cfg)
			k.setFrozen(t, transIn, true)
			c := newCall()
			out, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte("ok")})
			if err != nil || out.Status != txstatus.Failed || out.GID == "" {
				t.Fatalf("Submit = %+v, %v", out, err)
			}
			tr := waitTrans(t, k.srv, out.GID)
			if tr.Status != dtmcli.StatusFailed {
				t.Fatalf("saga %s", tr.Status)
			}
			ev := k.eventsOf(out.GID)
			for _, want := range []string{"01 action:200:proceed", "02 action:409:proceed",
				"02 compensate:200:null-compensation", "01 compensate:200:proceed"} {
				if !slices.Contains(ev, want) {
					t.Fatalf("branch calls %q lack %q", ev, want)
				}
			}
			if k.runsOf("/TransInCompensate") != 0 {
				t.Fatal("the failed step's compensation ran its business")
			}
			k.checkBalances(t, 0)
			rec := k.record(t, c)
			if rec.Status != idemkit.StatusFailed || rec.GID != out.GID {
				t.Fatalf("record %s gid %q", rec.Status, rec.GID)
			}
			if st := k.orderStatus(t, out.GID); st != "CANCELLED" {
				t.Fatalf("order %s", st)
			}

			// The client retries with the same key once the account is unfrozen: a new saga.
			k.setFrozen(t, transIn, false)
			again, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte("ok")})
			if err != nil || again.Replayed || again.Status != txstatus.Succeed || again.GID == out.GID {
				t.Fatalf("retry = %+v, %v", again, err)
			}
			k.checkBalances(t, amount)
			rec = k.record(t, c)
			if rec.Status != idemkit.StatusSucceeded || rec.GID != again.GID || string(rec.Response) != "ok" || rec.Fence != 2 {
				t.Fatalf("record after retry: %s gid %q response %q fence %d", rec.Status, rec.GID, rec.Response, rec.Fence)
			}
			if st := k.orderStatus(t, again.GID); st != "PAID" {
				t.Fatalf("order of the retry %s", st)
			}
		})
	}
}

// TestReconcilerSettlesDetachedSagas: the initiator claims the record, submits and dies (its hooks
// never run: Lifecycle.Begin, submit, Detach). A Reconciler under a sweeper leaves the record alone while
// the saga runs and, once DTM has the outcome, brings the record and the user's orders table to it —
// for a saga that succeeds and one that rolls back.
func TestReconcilerSettlesDetachedSagas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		frozen bool
		status idemkit.Status
		order  string
		moved  int
	}{
		{"Succeeds", false, idemkit.StatusSucceeded, "PAID", amount},
		{"RollsBack", true, idemkit.StatusFailed, "CANCELLED", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := newBank(t, nil)
			k.setFrozen(t, transIn, tc.frozen)
			c := newCall()
			gid := txstatus.NewGID()
			txn, _, err := k.lc.Begin(ctxb, "saga", gid, c)
			if err != nil {
				t.Fatal(err)
			}
			release := k.holdLock(t, gid, "01", "action") // keeps the saga running for the first pass
			s := dtmcli.NewSaga(k.srv.URL(), gid)
			k.addSteps(s)
			if err := s.Submit(); err != nil {
				t.Fatal(err)
			}
			k.lc.Detach(ctxb, txn) // the initiator dies here

			rc := &hooks.Reconciler{
				Lifecycle: k.lc,
				Scopes:    []string{"POST /transfers"},
				Manager:   &txstatus.Client{Server: k.srv.URL()},
				TransType: "saga",
			}
			// The sweeper's clock runs past the claim's lease: the record is pending.
			sw, err := sweep.New(&sweep.Options{Now: func() time.Time { return time.Now().Add(time.Hour) }}, rc.Task())
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "an in-flight answer", func() bool { return k.count(gid, "01 action:425:-") >= 1 })
			stats, err := sw.RunOnce(ctxb)
			if err != nil || stats["reconcile"] != 0 {
				t.Fatalf("pass while the saga runs: %v, %v", stats, err)
			}
			if rec := k.record(t, c); rec.Status != idemkit.StatusProcessing {
				t.Fatalf("record settled while the saga runs: %s", rec.Status)
			}
			if st := k.orderStatus(t, gid); st != "PENDING" {
				t.Fatalf("order %s while the saga runs", st)
			}

			release()
			if err := k.srv.ResetNextCronTime(ctxb, gid); err != nil {
				t.Fatal(err)
			}
			waitTrans(t, k.srv, gid)
			stats, err = sw.RunOnce(ctxb)
			if err != nil || stats["reconcile"] != 1 {
				t.Fatalf("pass after the outcome: %v, %v", stats, err)
			}
			rec := k.record(t, c)
			if rec.Status != tc.status || rec.GID != gid {
				t.Fatalf("record %s gid %q, want %s", rec.Status, rec.GID, tc.status)
			}
			if st := k.orderStatus(t, gid); st != tc.order {
				t.Fatalf("order %s, want %s", st, tc.order)
			}
			k.checkBalances(t, tc.moved)
			// A second pass finds nothing left.
			if stats, err := sw.RunOnce(ctxb); err != nil || stats["reconcile"] != 0 {
				t.Fatalf("second pass: %v, %v", stats, err)
			}
		})
	}
}

// TestSubmitInFlightDuplicate: a duplicate of a key whose saga is running gets ErrInFlight and
// submits nothing.
func TestSubmitInFlightDuplicate(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	c := newCall()
	gid := txstatus.NewGID()
	txn, _, err := k.lc.Begin(ctxb, "saga", gid, c)
	if err != nil {
		t.Fatal(err)
	}
	defer k.lc.Detach(ctxb, txn)
	_, err = k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: func(*dtmcli.Saga) { t.Error("a duplicate built a saga") }})
	if !errors.Is(err, idemkit.ErrInFlight) {
		t.Fatalf("duplicate of a running key: %v", err)
	}
}
