package saga_test

// Faults between the initiator and DTM, against a real DTM server: a proxy in front of it holds,
// drops, delays or answers for the requests, and the reconciler runs with a clock past the claims'
// leases. The promise checked each time: one saga per key takes effect at most once (exactly once
// when answered), and the record follows it.

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// via returns an initiator of k's sagas whose calls to DTM go through url (a proxy).
func (k *bank) via(url string) *saga.Initiator {
	return &saga.Initiator{
		Server:    url,
		Lifecycle: k.lc,
		Wait:      settleTimeout,
		Status:    &txstatus.Client{Server: url, HTTP: &http.Client{Timeout: 2 * settleTimeout}, PollInterval: 50 * time.Millisecond},
	}
}

// reconciler returns a reconciler of k's records that asks DTM directly.
func (k *bank) reconciler() *hooks.Reconciler {
	return &hooks.Reconciler{Lifecycle: k.lc, Scopes: []string{"POST /transfers"}, Manager: &txstatus.Client{Server: k.srv.URL()}, TransType: "saga"}
}

// reconcileLate runs the reconciler once with a clock an hour ahead: every claim's lease has run out.
func (k *bank) reconcileLate(t *testing.T) (int, []hooks.ReconcileEvent) {
	return testsvc.ReconcileLate(t, k.reconciler())
}

// onPost returns a proxy decision that applies a to the first POST to DTM's op endpoint and signals
// seen when it arrives; everything else passes.
func onPost(op string, a dtmserver.ProxyAction, seen chan<- string) func(r *http.Request) dtmserver.ProxyAction {
	var once sync.Once
	return func(r *http.Request) dtmserver.ProxyAction {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/"+op) {
			return dtmserver.ProxyAction{}
		}
		applied := false
		once.Do(func() { applied = true })
		if !applied {
			return dtmserver.ProxyAction{}
		}
		if seen != nil {
			seen <- op
		}
		return a
	}
}

type submitted struct {
	out hooks.Outcome
	err error
}

// heldSubmit starts a saga whose submit a gateway holds until release is closed, and returns once the
// submit is at the gateway: the call, its outcome to come and its record's gid.
func (k *bank) heldSubmit(t *testing.T) (release chan struct{}, c idemkit.Call, done <-chan submitted, gid string) {
	t.Helper()
	release, seen := make(chan struct{}), make(chan string, 1)
	p := dtmserver.NewProxy(t, k.srv, onPost("submit", dtmserver.ProxyAction{Hold: release}, seen))
	c = newCall()
	done = k.submitAsync(k.via(p.URL()), c)
	wait(t, "the submit at the gateway", seen)
	return release, c, done, k.record(t, c).GID
}

func (k *bank) submitAsync(init *saga.Initiator, c idemkit.Call) <-chan submitted {
	done := make(chan submitted, 1)
	go func() {
		out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte(`{"transfer":"done"}`)})
		done <- submitted{out, err}
	}()
	return done
}

func wait[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(settleTimeout + 10*time.Second):
		t.Fatalf("gave up waiting for %s", what)
		panic("unreachable")
	}
}

// TestLateSubmitAfterFenceIsRefused (issue 11, item 10): the initiator's submit is slow (held by a
// gateway) past the claim's lease; the reconciler finds the record pending and a gid DTM never heard
// of, fences the gid at DTM and rolls the record back. When the slow submit finally arrives, DTM
// refuses it: no step ever runs, the record stays FAILED, and the client's retry runs the one and only
// saga — the money moves once.
func TestLateSubmitAfterFenceIsRefused(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	release, c, done, gid := k.heldSubmit(t)

	n, events := k.reconcileLate(t)
	if n != 1 || len(events) != 1 || !events[0].Fenced || events[0].Status != txstatus.Failed {
		t.Fatalf("reconciler settled %d: %+v; want one record fenced and failed", n, events)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusFailed || rec.GID != gid {
		t.Fatalf("record after the reconciler: %s gid %q", rec.Status, rec.GID)
	}
	close(release) // the slow submit arrives
	res := wait(t, "Submit", done)
	if res.out.GID != gid || res.out.Status != txstatus.Failed || res.out.Result != nil {
		t.Fatalf("Submit = %+v, %v; want the fenced gid failed", res.out, res.err)
	}
	if tr := waitTrans(t, k.srv, gid); tr.Status != dtmcli.StatusFailed || tr.TransType != "tcc" || len(tr.Branches) != 0 {
		t.Fatalf("DTM holds %s as %s %s with %d branches; want the fence: an empty failed tcc", gid, tr.TransType, tr.Status, len(tr.Branches))
	}
	if k.runsOf("/TransOut") != 0 || k.runsOf("/TransIn") != 0 || len(k.eventsOf(gid)) != 0 {
		t.Fatalf("steps of the fenced saga ran: %q", k.eventsOf(gid))
	}
	k.checkBalances(t, 0)
	if rec := k.record(t, c); rec.Status != idemkit.StatusFailed || rec.GID != gid || !strings.Contains(rec.Error, "fenced") {
		t.Fatalf("record after the late submit: %s gid %q error %q", rec.Status, rec.GID, rec.Error)
	}
	if st := k.orderStatus(t, gid); st != "CANCELLED" {
		t.Fatalf("order %s", st)
	}

	// The client's retry: one new saga, the only one that runs.
	again, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte("ok")})
	if err != nil || again.Status != txstatus.Succeed || again.GID == gid {
		t.Fatalf("retry = %+v, %v", again, err)
	}
	k.checkBalances(t, amount)
	if k.runsOf("/TransOut") != 1 || k.runsOf("/TransIn") != 1 {
		t.Fatalf("actions ran %d and %d times", k.runsOf("/TransOut"), k.runsOf("/TransIn"))
	}
}

// TestNoStartOnALostClaim (issue 11, item 10): the initiator stalls after its claim (inside the
// BeforeTransaction hook) past the lease; meanwhile the reconciler fences the gid and settles the
// record. The initiator must not submit on the lost claim: Submit returns ErrFenced and builds no saga.
func TestNoStartOnALostClaim(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	c := newCall()
	before := k.lc.Before
	lc := *k.lc
	lc.Before = hooks.BeforeTransactionFunc(func(ctx context.Context, tx *hooks.Txn) error {
		if err := before.BeforeTransaction(ctx, tx); err != nil {
			return err
		}
		if n, _ := k.reconcileLate(t); n != 1 { // the stall: the reconciler acts meanwhile
			t.Errorf("the reconciler settled %d records during the stall", n)
		}
		return nil
	})
	init := &saga.Initiator{Server: k.srv.URL(), Lifecycle: &lc, Wait: settleTimeout}
	out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, Result: []byte("ok"), Steps: func(*dtmcli.Saga) {
		t.Error("a saga was built on a lost claim")
	}})
	if !errors.Is(err, idemkit.ErrFenced) || out.GID == "" {
		t.Fatalf("Submit = %+v, %v; want ErrFenced", out, err)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusFailed || rec.GID != out.GID {
		t.Fatalf("record %s gid %q", rec.Status, rec.GID)
	}
	if st, _ := (&txstatus.Client{Server: k.srv.URL()}).Status(ctxb, out.GID); st != txstatus.Failed {
		t.Fatalf("DTM holds %s as %q; want the fence (failed)", out.GID, st)
	}
	k.checkBalances(t, 0)
}

// TestSlowButValidStartStillSucceeds (issue 11, item 10): the submit reaches DTM but its answer is slow
// past the lease; the reconciler sees the saga running or done and follows it (no fence). The
// initiator's late answer and the record agree: success, one transfer, the stored result replayed.
func TestSlowButValidStartStillSucceeds(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	release, seen := make(chan struct{}), make(chan string, 1)
	p := dtmserver.NewProxy(t, k.srv, onPost("submit", dtmserver.ProxyAction{HoldAnswer: release}, seen))
	c := newCall()
	done := k.submitAsync(k.via(p.URL()), c)
	wait(t, "the submit at the gateway", seen)
	gid := k.record(t, c).GID
	waitTrans(t, k.srv, gid)
	n, events := k.reconcileLate(t)
	if n != 1 || events[0].Fenced || events[0].Status != txstatus.Succeed {
		t.Fatalf("reconciler settled %d: %+v", n, events)
	}
	close(release)
	res := wait(t, "Submit", done)
	if res.err != nil || res.out.Status != txstatus.Succeed || string(res.out.Result) != `{"transfer":"done"}` {
		t.Fatalf("Submit = %+v, %v", res.out, res.err)
	}
	k.checkBalances(t, amount)
	if rec := k.record(t, c); rec.Status != idemkit.StatusSucceeded || string(rec.Response) != `{"transfer":"done"}` {
		t.Fatalf("record %s %q", rec.Status, rec.Response)
	}
}

// TestGatewayErrorsAreNotRefusals (issue 11, item 11): a proxy or gateway in front of DTM answers the
// submit with 502, 503 or 504, or resets the connection, while the submit still reaches DTM after the
// initiator asked DTM about it (a gateway that gave up on a slow upstream). None of these is DTM's
// refusal: the record stays PROCESSING (a retry is in flight, never a second saga), the reconciler
// settles it SUCCEEDED with the result stored at the claim, and the retry replays it. A submit that
// never reaches DTM is fenced by the reconciler and rolled back; its retry runs the only saga.
func TestGatewayErrorsAreNotRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		action  func(later chan struct{}) dtmserver.ProxyAction
		reaches bool
	}{
		{"502-late", func(l chan struct{}) dtmserver.ProxyAction { return dtmserver.ProxyAction{Later: l, Status: 502} }, true},
		{"503-late", func(l chan struct{}) dtmserver.ProxyAction { return dtmserver.ProxyAction{Later: l, Status: 503} }, true},
		{"504-late", func(l chan struct{}) dtmserver.ProxyAction { return dtmserver.ProxyAction{Later: l, Status: 504} }, true},
		{"reset-late", func(l chan struct{}) dtmserver.ProxyAction { return dtmserver.ProxyAction{Later: l, Reset: true} }, true},
		{"502-forwarded", func(chan struct{}) dtmserver.ProxyAction { return dtmserver.ProxyAction{Status: 502} }, true},
		{"reset-forwarded", func(chan struct{}) dtmserver.ProxyAction { return dtmserver.ProxyAction{Reset: true} }, true},
		{"503-dropped", func(chan struct{}) dtmserver.ProxyAction { return dtmserver.ProxyAction{Drop: true, Status: 503} }, false},
		{"reset-dropped", func(chan struct{}) dtmserver.ProxyAction { return dtmserver.ProxyAction{Drop: true, Reset: true} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := newBank(t, nil)
			later := make(chan struct{})
			p := dtmserver.NewProxy(t, k.srv, onPost("submit", tc.action(later), nil))
			c := newCall()
			out, err := k.via(p.URL()).Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte(`{"transfer":"done"}`)})
			close(later)
			gid := out.GID
			if gid == "" {
				t.Fatalf("Submit = %+v, %v", out, err)
			}
			if err == nil && out.Status != txstatus.Succeed { // forwarded: DTM knew the saga by the time it was asked
				t.Fatalf("Submit = %+v, %v", out, err)
			}
			if err != nil {
				if rec := k.record(t, c); rec.Status != idemkit.StatusProcessing || rec.GID != gid {
					t.Fatalf("after %v: record %s gid %q; want PROCESSING for the reconciler", err, rec.Status, rec.GID)
				}
				if _, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps}); !errors.Is(err, idemkit.ErrInFlight) {
					t.Fatalf("retry while the outcome is unknown: %v; want ErrInFlight", err)
				}
				if tc.reaches {
					waitTrans(t, k.srv, gid)
				}
				if n, events := k.reconcileLate(t); n != 1 || events[0].Fenced == tc.reaches {
					t.Fatalf("reconciler settled %d: %+v", n, events)
				}
			}
			again, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte(`{"transfer":"again"}`)})
			switch {
			case err != nil:
				t.Fatalf("retry: %v", err)
			case tc.reaches && (!again.Replayed || string(again.Result) != `{"transfer":"done"}`):
				t.Fatalf("retry = %+v; want the first saga's result replayed", again)
			case !tc.reaches && (again.Replayed || again.Status != txstatus.Succeed || again.GID == gid):
				t.Fatalf("retry = %+v; want a new saga", again)
			}
			k.checkBalances(t, amount)
			if k.runsOf("/TransOut") != 1 || k.runsOf("/TransIn") != 1 {
				t.Fatalf("actions ran %d and %d times", k.runsOf("/TransOut"), k.runsOf("/TransIn"))
			}
		})
	}
}

// TestReconciledRecordReplaysItsResult (issue 11, item 1): the initiator submits and stops waiting
// (as one that died right after the submit); the reconciler settles the record from DTM's answer, and
// a duplicate gets the initiator's result — stored with the claim — not an empty one.
func TestReconciledRecordReplaysItsResult(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	c := newCall()
	init := *k.init
	init.Wait = 0 // return right after the submit, as if the process died there
	out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte(`{"order_id":"o-1"}`)})
	if err != nil || out.Status != txstatus.Submitted || string(out.Result) != `{"order_id":"o-1"}` {
		t.Fatalf("Submit = %+v, %v", out, err)
	}
	waitTrans(t, k.srv, out.GID)
	if n, _ := k.reconcileLate(t); n != 1 {
		t.Fatalf("reconciler settled %d", n)
	}
	dup, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte(`{"order_id":"o-2"}`)})
	if err != nil || !dup.Replayed || string(dup.Result) != `{"order_id":"o-1"}` {
		t.Fatalf("duplicate after the reconciler = %+v (result %q), %v; want the stored result", dup, dup.Result, err)
	}
	if st := k.orderStatus(t, out.GID); st != "PAID" {
		t.Fatalf("order %s", st)
	}
	k.checkBalances(t, amount)
}

// TestSubmitReportsResultAndReason (issue 11, item 18): a first success carries its result in
// Outcome.Result (as replays do), and a saga that rolls back reports DTM's reason — the message of the
// step that refused — in Outcome.Reason and on the record.
func TestSubmitReportsResultAndReason(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	out, err := k.init.Submit(ctxb, saga.SubmitParams{Call: newCall(), Steps: k.addSteps, Result: []byte("r")})
	if err != nil || out.Status != txstatus.Succeed || string(out.Result) != "r" || out.Reason != nil {
		t.Fatalf("first success = %+v, %v", out, err)
	}
	k.setFrozen(t, transIn, true)
	c := newCall()
	out, err = k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte("r")})
	if err != nil || out.Status != txstatus.Failed || out.Result != nil {
		t.Fatalf("rolled back = %+v, %v", out, err)
	}
	if !errors.Is(out.Reason, hooks.ErrRolledBack) || !strings.Contains(out.Reason.Error(), "frozen or balance too low") {
		t.Fatalf("reason %v; want the refusing step's message", out.Reason)
	}
	if rec := k.record(t, c); !strings.Contains(rec.Error, "frozen or balance too low") {
		t.Fatalf("record error %q", rec.Error)
	}
}

// beforeAbort is a transport that runs f before it sends the first POST to DTM's abort endpoint.
type beforeAbort struct {
	once sync.Once
	f    func()
}

func (b *beforeAbort) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/abort") {
		b.once.Do(b.f)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestSubmitBetweenFencePrepareAndAbortRanNothing: the initiator's submit is held at a gateway past
// the claim's lease; the reconciler fences the gid, and the submit reaches DTM between the fence's
// prepare and its abort. DTM v1.19 accepts it onto the fence's empty TCC and reports the gid succeed
// with no step stored or run; the fence's abort is refused. Neither the reconciler nor the initiator
// may take that for the saga's success: the record is rolled back (never started), Submit reports
// Failed, and the client's retry runs the one saga — the money moves once.
func TestSubmitBetweenFencePrepareAndAbortRanNothing(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	release, c, done, gid := k.heldSubmit(t)

	rc := k.reconciler()
	rc.Manager = &txstatus.Client{Server: k.srv.URL(), PollInterval: 50 * time.Millisecond, HTTP: &http.Client{Timeout: settleTimeout,
		Transport: &beforeAbort{f: func() {
			close(release) // the slow submit lands on the fence's prepared gid
			waitFor(t, "DTM to take the late submit", func() bool {
				tr, err := k.srv.Query(ctxb, gid)
				return err == nil && tr.Status != dtmcli.StatusPrepared
			})
		}}}}
	var events []hooks.ReconcileEvent
	rc.Observe = func(_ context.Context, e *hooks.ReconcileEvent) { events = append(events, *e) }
	// The released initiator may roll the record back before the reconciler does: either settles it.
	n, err := rc.RunOnce(ctxb, time.Now().Add(time.Hour), 10)
	if err != nil || n > 1 || len(events) != 1 || !events[0].Fenced || events[0].Status != txstatus.Failed {
		t.Fatalf("reconciler settled %d, %v: %+v; want the record fenced and rolled back", n, err, events)
	}
	if tr := waitTrans(t, k.srv, gid); tr.Status != dtmcli.StatusSucceed || len(tr.Branches) != 0 {
		t.Fatalf("DTM holds %s as %s %s with %d branches; want the fence taken over by the submit", gid, tr.TransType, tr.Status, len(tr.Branches))
	}
	res := wait(t, "Submit", done)
	if res.err != nil || res.out.GID != gid || res.out.Status != txstatus.Failed || res.out.Result != nil ||
		!errors.Is(res.out.Reason, hooks.ErrRolledBack) {
		t.Fatalf("Submit = %+v, %v; want Failed, never started", res.out, res.err)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusFailed || rec.GID != gid || !strings.Contains(rec.Error, "never started") {
		t.Fatalf("record %s gid %q error %q", rec.Status, rec.GID, rec.Error)
	}
	if st := k.orderStatus(t, gid); st != "CANCELLED" {
		t.Fatalf("order %s", st)
	}
	if k.runsOf("/TransOut") != 0 || k.runsOf("/TransIn") != 0 {
		t.Fatalf("steps ran")
	}
	k.checkBalances(t, 0)

	again, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte("ok")})
	if err != nil || again.Status != txstatus.Succeed || again.GID == gid {
		t.Fatalf("retry = %+v, %v", again, err)
	}
	k.checkBalances(t, amount)
}

// TestSubmitOnAHalfFenceRanNothing: the fence's abort is lost, leaving the fence's empty TCC prepared;
// a late submit of the saga lands on it and DTM reports the gid succeed with no step run. The next
// reconciler pass does not commit the record: it rolls it back.
func TestSubmitOnAHalfFenceRanNothing(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	c := newCall()
	init := *k.init
	init.Wait = 0
	gid := txstatus.NewGID()
	lost := dtmserver.NewProxy(t, k.srv, onPost("submit", dtmserver.ProxyAction{Drop: true}, nil))
	init.Server, init.Status = lost.URL(), &txstatus.Client{Server: lost.URL()}
	if _, err := init.Submit(ctxb, saga.SubmitParams{Call: c, GID: gid, Steps: k.addSteps, Result: []byte("ok")}); err == nil {
		t.Fatal("a dropped submit reported no error")
	}
	rc := k.reconciler()
	noAbort := dtmserver.NewProxy(t, k.srv, onPost("abort", dtmserver.ProxyAction{Drop: true}, nil))
	rc.Manager = &txstatus.Client{Server: noAbort.URL()}
	if n, err := rc.RunOnce(ctxb, time.Now().Add(time.Hour), 10); n != 0 || err == nil {
		t.Fatalf("a fence whose abort was lost: settled %d, %v", n, err)
	}
	s := dtmcli.NewSaga(k.srv.URL(), gid)
	k.addSteps(s)
	if err := s.Submit(); err != nil { // the late submit
		t.Fatal(err)
	}
	if tr := waitTrans(t, k.srv, gid); tr.Status != dtmcli.StatusSucceed || len(tr.Branches) != 0 {
		t.Fatalf("DTM holds %s as %s %s with %d branches", gid, tr.TransType, tr.Status, len(tr.Branches))
	}
	if n, _ := k.reconcileLate(t); n != 1 {
		t.Fatalf("second pass settled %d", n)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusFailed || !strings.Contains(rec.Error, "never started") {
		t.Fatalf("record %s %q", rec.Status, rec.Error)
	}
	if st := k.orderStatus(t, gid); st != "CANCELLED" || k.runsOf("/TransOut") != 0 {
		t.Fatalf("order %s, TransOut ran %d times", st, k.runsOf("/TransOut"))
	}
}

// TestSubmitOfAReusedGIDNeverStarts: a new key's saga with the gid of a saga that succeeded: DTM
// refuses the submit, so nothing of it started. The record is rolled back, the commit hook does not run
// for it, and Submit reports Failed, not the other saga's success.
func TestSubmitOfAReusedGIDNeverStarts(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	gid := txstatus.NewGID()
	if out, err := k.init.Submit(ctxb, saga.SubmitParams{Call: newCall(), GID: gid, Steps: k.addSteps, Result: []byte("one")}); err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("first = %+v, %v", out, err)
	}
	init, committed := k.committingInitiator()
	c := newCall()
	out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, GID: gid, Steps: k.addSteps, Result: []byte("two")})
	if err != nil || out.Status != txstatus.Failed || out.Result != nil || !errors.Is(out.Reason, txstatus.ErrRefused) {
		t.Fatalf("reused gid = %+v, %v; want Failed, refused", out, err)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusFailed || !strings.Contains(rec.Error, "never started") {
		t.Fatalf("record %s %q", rec.Status, rec.Error)
	}
	if len(*committed) != 0 {
		t.Fatalf("commit hook ran for %q", *committed)
	}
	k.checkBalances(t, amount)

	// A saga without steps is not submitted either.
	c = newCall()
	out, err = k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: func(*dtmcli.Saga) {}})
	if err != nil || out.Status != txstatus.Failed || !errors.Is(out.Reason, txstatus.ErrRefused) {
		t.Fatalf("empty saga = %+v, %v", out, err)
	}
	if st, _ := (&txstatus.Client{Server: k.srv.URL()}).Status(ctxb, out.GID); st != txstatus.Unknown {
		t.Fatalf("DTM holds the empty saga as %q", st)
	}
}
