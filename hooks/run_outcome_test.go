package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/txstatus"
)

// TestPermanentFailureSettledFirstByReconciler: a TCC whose try failed permanently (the initiator
// aborts with hooks.PermanentReason) and whose wait outlived the lease, so a Reconciler recorded it
// REJECTED first. Run's Rollback is fenced, agrees() accepts the outcome, and Run returns a nil error:
// the first call does not get the *idemkit.RejectedError every replay of the key gets ("A permanent
// failure is an *idemkit.RejectedError, on a replay as on the first call").
func TestPermanentFailureSettledFirstByReconciler(t *testing.T) {
	b := setup(t)
	errCheck := errors.New("customer blocked")
	status := dtmAnswering(t, `{"branches":[{"op":"cancel"},{"op":"confirm"}],"transaction":{"status":"failed","trans_type":"tcc","rollback_reason":"`+
		hooks.PermanentReason+errCheck.Error()+`"}}`)
	r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, TransType: "tcc", Manager: status}
	p := hooks.RunParams{TransType: "tcc", Call: call("k"), Status: status, Wait: time.Second,
		Start: func(ctx context.Context, gid string) error {
			b.clock.Advance(2 * time.Second) // past the lease: the record is pending
			if n, err := r.RunOnce(ctx, b.clock.Now(), 10); n != 1 || err != nil {
				t.Errorf("reconciler settled %d, %v", n, err)
			}
			return idemkit.Permanent(errCheck)
		}}
	out, first := b.lc.Run(ctxb, p)
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusRejected {
		t.Fatalf("record %s, want REJECTED", rec.Status)
	}
	_, replay := b.lc.Run(ctxb, p)
	var r1, r2 *idemkit.RejectedError
	if !errors.As(replay, &r2) {
		t.Fatalf("replay %v: want *idemkit.RejectedError", replay)
	}
	if !errors.As(first, &r1) {
		t.Fatalf("first call: Outcome %+v, error %v; a replay returns %v: want the same *idemkit.RejectedError on the first call", out, first, replay)
	}
}

// TestCallResultAndRunResultAgree: RunParams.Result is "stored with the claim (as Call.Result,
// unless that is set)". With both set, the live path commits RunParams.Result over the claim's, while
// the first call returns Call.Result and a Reconciler (after a crash) commits Call.Result: the replay
// differs from the first call's answer, and the live and crash paths store different results.
func TestCallResultAndRunResultAgree(t *testing.T) {
	b := setup(t)
	status := dtmAnswering(t, `{"branches":[{"op":"action"},{"op":"compensate"}],"transaction":{"status":"succeed","trans_type":"saga"}}`)
	c := call("k")
	c.Result = []byte("call-result")
	p := hooks.RunParams{TransType: "saga", Call: c, Status: status, Wait: time.Second, Result: []byte("run-result"),
		Start: func(context.Context, string) error { return nil }}
	out, err := b.lc.Run(ctxb, p)
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("Run = %+v, %v", out, err)
	}
	replay, err := b.lc.Run(ctxb, p)
	if err != nil || !replay.Replayed {
		t.Fatalf("replay = %+v, %v", replay, err)
	}
	if string(out.Result) != string(replay.Result) {
		t.Fatalf("first call answered %q, its replay %q", out.Result, replay.Result)
	}
}

// TestSucceededOutcomeHasNoReason: Outcome.Reason "says why a transaction failed to start or
// rolled back ... Nil otherwise". A saga whose submit answer was lost (a gateway's 502 after DTM
// accepted it) and which then succeeded is reported Succeed with Reason set to the submit error.
func TestSucceededOutcomeHasNoReason(t *testing.T) {
	b := setup(t)
	status := dtmAnswering(t, `{"branches":[{"op":"action"},{"op":"compensate"}],"transaction":{"status":"succeed","trans_type":"saga"}}`)
	out, err := b.lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("k"), Status: status, Wait: time.Second,
		Start: func(context.Context, string) error { return errors.New("txstatus: submit: outcome unknown: HTTP 502") }})
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("Run = %+v, %v", out, err)
	}
	if out.Reason != nil {
		t.Fatalf("a succeeded transaction reports Reason %v", out.Reason)
	}
}

// TestLostSubmitAnswerKeepsDTMRollbackReason: a saga whose submit answer was lost (502 after DTM
// accepted it) and which DTM then rolled back because a step failed. Outcome.Reason should carry "DTM's
// rollback reason (the message of the saga step that failed)", as the record a Reconciler settles
// does; Run reports and stores the lost submit's error instead, so the live and crash paths store
// different errors for the same saga.
func TestLostSubmitAnswerKeepsDTMRollbackReason(t *testing.T) {
	b := setup(t)
	status := dtmAnswering(t, `{"branches":[{"op":"action"},{"op":"compensate"}],"transaction":{"status":"failed","trans_type":"saga","rollback_reason":"account 2 frozen"}}`)
	out, err := b.lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("k"), Status: status, Wait: time.Second,
		Start: func(context.Context, string) error { return errors.New("txstatus: submit: outcome unknown: HTTP 502") }})
	if err != nil || out.Status != txstatus.Failed {
		t.Fatalf("Run = %+v, %v", out, err)
	}
	rec := b.status(t, "k")
	if out.Reason == nil || !strings.Contains(out.Reason.Error(), "account 2 frozen") || !strings.Contains(rec.Error, "account 2 frozen") {
		t.Fatalf("Reason %v, record error %q: want DTM's rollback reason, as the Reconciler records", out.Reason, rec.Error)
	}
}

// refusingUpdates is a record store that refuses, on Update only, the error message of a failed
// step (as a column too narrow for it would): the Guard then stores a replacement outcome.
type refusingUpdates struct{ *memory.Store }

func (s refusingUpdates) Update(ctx context.Context, r *idemkit.Record, prev idemkit.Version) error {
	if strings.Contains(r.Error, "a step failed") {
		return fmt.Errorf("test: %w: error message too long", idemkit.ErrUnstorable)
	}
	return s.Store.Update(ctx, r, prev)
}

// TestReconcilerSettlesWithAReplacementOutcome: when the Store refuses the outcome the Reconciler
// settles (its reason too long for the column), the Guard stores a replacement (REJECTED) and the
// record is settled — the Reconciler counted it an error, not settled, though it was.
func TestReconcilerSettlesWithAReplacementOutcome(t *testing.T) {
	g, lc, clock := detachedOnRefusingStore(t)
	clock.Advance(2 * time.Second)
	r := &hooks.Reconciler{Lifecycle: lc, Scopes: []string{"create-order"}, TransType: "saga", Manager: infoManager{txstatus.Info{
		Status: txstatus.Failed, TransType: "saga", Branches: 2, RollbackReason: "a step failed with a long message"}}}
	if n, err := r.RunOnce(ctxb, clock.Now(), 10); n != 1 || err != nil {
		t.Fatalf("RunOnce = %d, %v: want the record settled", n, err)
	}
	if rec, err := g.Get(ctxb, "create-order", "k"); err != nil || rec.Status == idemkit.StatusProcessing {
		t.Fatalf("record %+v, %v", rec, err)
	}
}

// detachedOnRefusingStore is a Lifecycle whose Guard (lease 1s, on clock) keeps its records in a
// refusingUpdates store, with the claim of key "k" (gid "g1") made and detached.
func detachedOnRefusingStore(t *testing.T) (*idemkit.Guard, *hooks.Lifecycle, *idemtest.Clock) {
	t.Helper()
	clock := idemtest.NewClock()
	g, err := idemkit.New(refusingUpdates{memory.NewStore()}, &idemkit.Options{Lease: time.Second, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	lc := &hooks.Lifecycle{Guard: g}
	txn, _, err := lc.Begin(ctxb, "saga", "g1", call("k"))
	if err != nil {
		t.Fatal(err)
	}
	lc.Detach(ctxb, txn)
	return g, lc, clock
}

// TestSettleFencedAfterRefusal: the Store refuses the outcome's values and the record was
// settled by another meanwhile, so the replacement write is fenced. Guard.Settle returns
// errors.Join(refused, ErrFenced); Lifecycle's settle swallowed anything matching ErrUnstorable
// that is not ErrStoreUnavailable, so Rollback reported success for an outcome that was not written
// (found by a review).
func TestSettleFencedAfterRefusal(t *testing.T) {
	g, lc, _ := detachedOnRefusingStore(t)
	stale, err := g.Get(ctxb, "create-order", "k")
	if err != nil {
		t.Fatal(err)
	}
	// Someone else (the initiator) settles the record first.
	if err := g.Settle(ctxb, stale, []byte("ok"), nil); err != nil {
		t.Fatal(err)
	}
	// A Reconciler working from the stale copy rolls back with a reason the Store refuses.
	tx := &hooks.Txn{TransType: "saga", GID: "g1", Record: *stale}
	err = lc.Rollback(ctxb, tx, errors.New("a step failed with a long message"))
	if !errors.Is(err, idemkit.ErrFenced) {
		t.Fatalf("Rollback = %v; want ErrFenced (the record was SUCCEEDED by another, nothing written)", err)
	}
}
