package tcc_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// TestGlobalNormal: both tries reserve, DTM confirms both, the record is SUCCEEDED with the result,
// and a duplicate of the finished key replays it without starting a transaction.
func TestGlobalNormal(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	c := newCall()
	out, err := k.global.Run(ctxb, k.runParams(c))
	if err != nil || out.Status != txstatus.Succeed || out.GID == "" || out.Reason != nil {
		t.Fatalf("Run = %+v, %v", out, err)
	}
	if tr := waitTrans(t, k.srv, out.GID); tr.Status != dtmcli.StatusSucceed {
		t.Fatalf("TCC %s", tr.Status)
	}
	k.expectEvents(t, out.GID, "01 try:200:proceed", "02 try:200:proceed", "01 confirm:200:proceed", "02 confirm:200:proceed")
	k.checkBalances(t, amount)
	rec := k.record(t, c)
	if rec.Status != idemkit.StatusSucceeded || rec.GID != out.GID || string(rec.Response) != `{"transfer":"done"}` {
		t.Fatalf("record %s gid %q response %q", rec.Status, rec.GID, rec.Response)
	}

	p := k.runParams(c)
	p.Tries = func(*dtmcli.Tcc) error { t.Error("a replay called the tries"); return nil }
	dup, err := k.global.Run(ctxb, p)
	if err != nil || !dup.Replayed || dup.GID != "" || string(dup.Result) != `{"transfer":"done"}` {
		t.Fatalf("duplicate: %+v, %v", dup, err)
	}
	if k.tryCount() != 1 {
		t.Fatalf("the try ran %d times", k.tryCount())
	}
}

// TestGlobalTryFailsPermanently: the Redis try refuses (the account is frozen: a FAILURE reply, 409);
// the initiator aborts, DTM cancels the tried branch and the refused one's cancel is empty; the record
// is FAILED, so the client may retry with the same key.
func TestGlobalTryFailsPermanently(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	if err := k.rdb.HSet(ctxb, k.inKey, "frozen", 1).Err(); err != nil {
		t.Fatal(err)
	}
	c := newCall()
	out, err := k.global.Run(ctxb, k.runParams(c))
	if err != nil || out.Status != txstatus.Failed || out.GID == "" || out.Reason == nil {
		t.Fatalf("Run = %+v, %v", out, err)
	}
	if tr := waitTrans(t, k.srv, out.GID); tr.Status != dtmcli.StatusFailed {
		t.Fatalf("TCC %s", tr.Status)
	}
	k.expectEvents(t, out.GID, "01 try:200:proceed", "02 try:409:proceed", "01 cancel:200:proceed", "02 cancel:200:null-compensation")
	k.checkBalances(t, 0)
	rec := k.record(t, c)
	if rec.Status != idemkit.StatusFailed || rec.GID != out.GID {
		t.Fatalf("record %s gid %q", rec.Status, rec.GID)
	}

	// Unfrozen, the same key runs a new transaction.
	if err := k.rdb.HSet(ctxb, k.inKey, "frozen", 0).Err(); err != nil {
		t.Fatal(err)
	}
	again, err := k.global.Run(ctxb, k.runParams(c))
	if err != nil || again.Status != txstatus.Succeed || again.GID == out.GID {
		t.Fatalf("retry = %+v, %v", again, err)
	}
	k.checkBalances(t, amount)
}

// TestGlobalDuplicateOfRunningIsInFlight: while a transaction's try is held, a duplicate with the same
// key gets ErrInFlight and starts nothing; the first one then finishes normally.
func TestGlobalDuplicateOfRunningIsInFlight(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	entered, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	k.mu.Lock()
	k.gate = func() {
		once.Do(func() {
			close(entered)
			<-proceed
		})
	}
	k.mu.Unlock()
	c := newCall()
	type ran struct {
		out hooks.Outcome
		err error
	}
	done := make(chan ran, 1)
	go func() {
		out, err := k.global.Run(ctxb, k.runParams(c))
		done <- ran{out, err}
	}()
	<-entered

	p := k.runParams(c)
	p.Tries = func(*dtmcli.Tcc) error { t.Error("a duplicate called the tries"); return nil }
	dup, err := k.global.Run(ctxb, p)
	if !errors.Is(err, idemkit.ErrInFlight) || dup.GID != "" {
		t.Fatalf("duplicate of a running key: %+v, %v", dup, err)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusProcessing || rec.GID == "" {
		t.Fatalf("record while running: %s gid %q", rec.Status, rec.GID)
	}

	close(proceed)
	var first ran
	select {
	case first = <-done:
	case <-time.After(settleTimeout + 5*time.Second):
		t.Fatal("Run did not return")
	}
	if first.err != nil || first.out.Status != txstatus.Succeed {
		t.Fatalf("first Run = %+v, %v", first.out, first.err)
	}
	k.checkBalances(t, amount)
	if rec := k.record(t, c); rec.Status != idemkit.StatusSucceeded || rec.GID != first.out.GID {
		t.Fatalf("record %s gid %q", rec.Status, rec.GID)
	}
}

// TestGlobalPermanentTryErrorHasOneShape: Tries fails with an error marked idemkit.Permanent after the
// branches were tried. DTM cancels them; the record is REJECTED, and the first call returns, beside
// the Outcome with Status Failed, the *idemkit.RejectedError every replay returns. DTM's rollback
// reason carries hooks.PermanentReason, so a Reconciler settling the record would reject it too.
func TestGlobalPermanentTryErrorHasOneShape(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	c := newCall()
	p := k.runParams(c)
	tries := p.Tries
	errCheck := errors.New("post-try check refused")
	p.Tries = func(tc *dtmcli.Tcc) error {
		if err := tries(tc); err != nil {
			return err
		}
		return idemkit.Permanent(errCheck)
	}
	out, first := k.global.Run(ctxb, p)
	if out.Status != txstatus.Failed || out.Result != nil || !errors.Is(out.Reason, errCheck) {
		t.Fatalf("Run = %+v, %v", out, first)
	}
	tr := waitTrans(t, k.srv, out.GID)
	if tr.Status != dtmcli.StatusFailed || tr.RollbackReason != hooks.PermanentReason+errCheck.Error() {
		t.Fatalf("TCC %s, reason %q", tr.Status, tr.RollbackReason)
	}
	k.expectEvents(t, out.GID, "01 try:200:proceed", "02 try:200:proceed", "02 cancel:200:proceed", "01 cancel:200:proceed")
	k.checkBalances(t, 0)
	replayed, replay := k.global.Run(ctxb, k.runParams(c))
	var r1, r2 *idemkit.RejectedError
	if !errors.As(first, &r1) || !errors.As(replay, &r2) || !replayed.Replayed {
		t.Fatalf("first %v (%T), replay %v (%T): want *idemkit.RejectedError both times", first, first, replay, replay)
	}
	if r1.Message != r2.Message || first.Error() != replay.Error() || !errors.Is(first, errCheck) {
		t.Fatalf("first %q, replay %q", first, replay)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusRejected || rec.GID != out.GID {
		t.Fatalf("record %s gid %q", rec.Status, rec.GID)
	}
}

// TestGlobalClassifiedTryErrorIsAPermanentReason: a try error the Guard's own classifier calls
// permanent (not marked idemkit.Permanent) is recorded REJECTED by the initiator, so DTM's rollback
// reason must say permanent too: a Reconciler settling the record after an initiator crash reads
// the reason, and recorded FAILED (run again) where the initiator recorded REJECTED.
func TestGlobalClassifiedTryErrorIsAPermanentReason(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	errCheck := errors.New("post-try check refused")
	opts := k.opts
	opts.IsPermanent = func(err error) bool { return errors.Is(err, errCheck) }
	guard, err := idemkit.New(k.store, &opts)
	if err != nil {
		t.Fatal(err)
	}
	global := *k.global
	global.Lifecycle = &hooks.Lifecycle{Guard: guard}
	c := newCall()
	p := k.runParams(c)
	tries := p.Tries
	p.Tries = func(tc *dtmcli.Tcc) error {
		if err := tries(tc); err != nil {
			return err
		}
		return errCheck
	}
	out, first := global.Run(ctxb, p)
	if out.Status != txstatus.Failed || !errors.Is(first, idemkit.ErrRejected) {
		t.Fatalf("Run = %+v, %v: want Failed and the rejection", out, first)
	}
	tr := waitTrans(t, k.srv, out.GID)
	if tr.Status != dtmcli.StatusFailed || tr.RollbackReason != hooks.PermanentReason+errCheck.Error() {
		t.Fatalf("TCC %s, reason %q: want the permanent reason", tr.Status, tr.RollbackReason)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusRejected {
		t.Fatalf("record %s, want REJECTED", rec.Status)
	}
}

// TestGlobalReusedGIDNeverStarts: a new key's TCC with the gid of one that succeeded: DTM refuses the
// prepare, so nothing of it started (no try ran). The record is rolled back and Run reports Failed,
// not the other transaction's success.
func TestGlobalReusedGIDNeverStarts(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	out1, err := k.global.Run(ctxb, k.runParams(newCall()))
	if err != nil || out1.Status != txstatus.Succeed {
		t.Fatalf("first = %+v, %v", out1, err)
	}
	tried := k.tryCount()
	c := newCall()
	p := k.runParams(c)
	p.GID = out1.GID
	out, err := k.global.Run(ctxb, p)
	if err != nil || out.Status != txstatus.Failed || out.Result != nil || !errors.Is(out.Reason, txstatus.ErrRefused) {
		t.Fatalf("reused gid = %+v, %v; want Failed, refused", out, err)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusFailed || !strings.Contains(rec.Error, "never started") {
		t.Fatalf("record %s %q", rec.Status, rec.Error)
	}
	if k.tryCount() != tried {
		t.Fatalf("tries ran %d times; want the first transaction's %d", k.tryCount(), tried)
	}
	k.checkBalances(t, amount)
}

// TestGlobalRefusedSubmitFollowsTheTransaction: DTM refuses the submit after the tries, because the
// transaction was aborted meanwhile (as a timeout or a reconciler's fence would). The transaction
// exists and its tries ran: Run does not take the refusal for "never started" but follows its status —
// DTM cancels the tried branches and the record is FAILED with DTM's reason.
func TestGlobalRefusedSubmitFollowsTheTransaction(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	c := newCall()
	p := k.runParams(c)
	tries := p.Tries
	p.Tries = func(tc *dtmcli.Tcc) error {
		if err := tries(tc); err != nil {
			return err
		}
		abort := map[string]any{"gid": tc.Gid, "trans_type": "tcc", "rollback_reason": "aborted under the initiator"}
		if err := (&txstatus.Client{Server: k.srv.URL()}).Call(ctxb, "abort", tc.Gid, abort); err != nil {
			t.Errorf("aborting under the initiator: %v", err)
		}
		return nil
	}
	out, err := k.global.Run(ctxb, p)
	if err != nil || out.Status != txstatus.Failed || out.Reason == nil || errors.Is(out.Reason, txstatus.ErrRefused) ||
		strings.Contains(out.Reason.Error(), "never started") {
		t.Fatalf("Run = %+v, %v; want the aborted transaction followed to failed", out, err)
	}
	k.expectEvents(t, out.GID, "01 try:200:proceed", "02 try:200:proceed", "02 cancel:200:proceed", "01 cancel:200:proceed")
	k.checkBalances(t, 0)
	if rec := k.record(t, c); rec.Status != idemkit.StatusFailed || strings.Contains(rec.Error, "never started") {
		t.Fatalf("record %s %q", rec.Status, rec.Error)
	}
}
