package tcc_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/dtm-labs/client/dtmcli/dtmimp"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/tcc"
	"github.com/idemkit/idemkit/txstatus"
)

// rawSvc answers a TCC branch's try, confirm and cancel with 200, without a barrier; confirm and
// cancel fail (500) while their flag is set.
type rawSvc struct {
	url                      string
	failConfirm, failCancel  atomic.Bool
	tries, confirms, cancels atomic.Int32
}

func newRawSvc(t *testing.T) *rawSvc {
	s := &rawSvc{}
	ok := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"dtm_result":"SUCCESS"}`))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/Try", func(w http.ResponseWriter, r *http.Request) { s.tries.Add(1); ok(w) })
	mux.HandleFunc("/Confirm", func(w http.ResponseWriter, r *http.Request) {
		s.confirms.Add(1)
		if s.failConfirm.Load() {
			http.Error(w, "confirm broken", 500)
			return
		}
		ok(w)
	})
	mux.HandleFunc("/Cancel", func(w http.ResponseWriter, r *http.Request) {
		s.cancels.Add(1)
		if s.failCancel.Load() {
			http.Error(w, "cancel broken", 500)
			return
		}
		ok(w)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// params runs one branch of s, then fails with tryErr (nil: the TCC submits).
func (s *rawSvc) params(c idemkit.Call, tryErr error) tcc.RunParams {
	return tcc.RunParams{
		Call:    c,
		Result:  []byte("R"),
		Options: func(t *dtmcli.Tcc) { t.RetryInterval = 1 },
		Tries: func(t *dtmcli.Tcc) error {
			if _, err := t.CallBranch(&transfer{Amount: 1}, s.url+"/Try", s.url+"/Confirm", s.url+"/Cancel"); err != nil {
				return err
			}
			return tryErr
		},
	}
}

// reconcileLate runs a reconciler of k's records once, with a clock an hour ahead: every claim's
// lease has run out.
func (k *bank) reconcileLate(t *testing.T) (int, []hooks.ReconcileEvent) {
	return testsvc.ReconcileLate(t, &hooks.Reconciler{Lifecycle: k.global.Lifecycle, Scopes: []string{"POST /transfers"},
		Manager: &txstatus.Client{Server: k.srv.URL()}, TransType: "tcc"})
}

// TestConfirmFailingPastWait: a confirm fails (500) past Wait. Run reports Submitted with the result
// and no error; the record stays PROCESSING (a duplicate is in flight); once the confirm went through,
// the reconciler records SUCCEEDED and a duplicate replays the result. The try ran once.
func TestConfirmFailingPastWait(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	s := newRawSvc(t)
	s.failConfirm.Store(true)
	g := *k.global
	g.Wait = 2 * time.Second
	c := newCall()
	out, err := g.Run(ctxb, s.params(c, nil))
	if err != nil || out.Status != txstatus.Submitted || string(out.Result) != "R" {
		t.Fatalf("out = %+v, %v", out, err)
	}
	if _, err := g.Run(ctxb, s.params(c, nil)); !errors.Is(err, idemkit.ErrInFlight) {
		t.Fatalf("dup = %v", err)
	}
	s.failConfirm.Store(false)
	waitTrans(t, k.srv, out.GID)
	if n, ev := k.reconcileLate(t); n != 1 {
		t.Fatalf("reconciler %d %+v", n, ev)
	}
	dup, err := g.Run(ctxb, s.params(c, nil))
	if err != nil || !dup.Replayed || string(dup.Result) != "R" {
		t.Fatalf("dup = %+v, %v", dup, err)
	}
	if s.tries.Load() != 1 {
		t.Fatalf("tries %d", s.tries.Load())
	}
}

// TestCancelFailingPastWait: a try fails, retryably or permanently (idemkit.Permanent), and the cancel
// of the branch tried fails (500) past Wait. Run reports Aborting with the try's error as the reason,
// no result and no error; a duplicate is in flight; once the cancel went through, the reconciler records
// the key FAILED (a retry runs a new TCC, which succeeds) or REJECTED (a retry gets the
// *idemkit.RejectedError), as the initiator would have.
func TestCancelFailingPastWait(t *testing.T) {
	for _, perm := range []bool{false, true} {
		t.Run(map[bool]string{false: "retryable", true: "permanent"}[perm], func(t *testing.T) {
			t.Parallel()
			k := newBank(t)
			s := newRawSvc(t)
			s.failCancel.Store(true)
			g := *k.global
			g.Wait = 2 * time.Second
			c := newCall()
			var tryErr error = errors.New("try says no")
			if perm {
				tryErr = idemkit.Permanent(tryErr)
			}
			out, err := g.Run(ctxb, s.params(c, tryErr))
			if err != nil || out.Status != txstatus.Aborting || out.Result != nil || out.Reason == nil || !strings.Contains(out.Reason.Error(), "try says no") {
				t.Fatalf("out = %+v, %v", out, err)
			}
			if _, err := g.Run(ctxb, s.params(c, nil)); !errors.Is(err, idemkit.ErrInFlight) {
				t.Fatalf("dup = %v", err)
			}
			s.failCancel.Store(false)
			waitTrans(t, k.srv, out.GID)
			if n, ev := k.reconcileLate(t); n != 1 {
				t.Fatalf("reconciler %d %+v", n, ev)
			}
			rec := k.record(t, c)
			dup, err := g.Run(ctxb, s.params(c, nil))
			if perm {
				if rec.Status != idemkit.StatusRejected || !errors.Is(err, idemkit.ErrRejected) {
					t.Fatalf("record %s dup %v", rec.Status, err)
				}
			} else if rec.Status != idemkit.StatusFailed || err != nil || dup.Status != txstatus.Succeed {
				t.Fatalf("record %s dup %+v %v", rec.Status, dup, err)
			}
		})
	}
}

// TestInitiatorDeadAfterItsPrepare: the initiator claims the key, prepares the TCC (TimeoutToFail 2 s)
// and calls a try, then dies. A duplicate is in flight; the reconciler leaves the prepared TCC alone;
// DTM aborts it at its timeout and cancels the try; the reconciler then records FAILED, and a retry of
// the key runs a new TCC.
func TestInitiatorDeadAfterItsPrepare(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	s := newRawSvc(t)
	c := newCall()
	c.Result = []byte("R")
	gid := txstatus.NewGID()
	tx, _, err := k.global.Lifecycle.Begin(ctxb, "tcc", gid, c)
	if err != nil || tx == nil {
		t.Fatal(err)
	}
	tc := &dtmcli.Tcc{TransBase: *dtmimp.NewTransBase(gid, "tcc", k.srv.URL(), "")}
	tc.TimeoutToFail = 2
	tc.RetryInterval = 1
	st := &txstatus.Client{Server: k.srv.URL()}
	if err := st.Call(ctxb, "prepare", gid, &tc.TransBase); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.CallBranch(&transfer{Amount: 1}, s.url+"/Try", s.url+"/Confirm", s.url+"/Cancel"); err != nil {
		t.Fatal(err)
	}
	// The initiator dies here. A duplicate:
	if _, err := k.global.Run(ctxb, s.params(c, nil)); !errors.Is(err, idemkit.ErrInFlight) {
		t.Fatalf("dup = %v", err)
	}
	if n, ev := k.reconcileLate(t); n != 0 {
		t.Fatalf("reconciler settled a prepared TCC: %d %+v", n, ev)
	}
	if tr := waitTrans(t, k.srv, gid); tr.Status != "failed" {
		t.Fatalf("DTM holds %s as %s", gid, tr.Status)
	}
	if n, ev := k.reconcileLate(t); n != 1 {
		t.Fatalf("reconciler %d %+v", n, ev)
	}
	if s.cancels.Load() == 0 {
		t.Fatal("DTM never cancelled the try")
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s %q, want FAILED", rec.Status, rec.Error)
	}
	again, err := k.global.Run(ctxb, s.params(c, nil))
	if err != nil || again.Status != txstatus.Succeed || again.GID == gid {
		t.Fatalf("again = %+v, %v", again, err)
	}
}
