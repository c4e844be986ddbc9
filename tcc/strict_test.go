package tcc_test

import (
	"errors"
	"testing"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// TestDTMErrorsStayRetryableUnderAStrictClassifier: DTM refuses the submit after the tries (the
// transaction was aborted meanwhile), and Run follows the transaction to failed. The refusal is DTM's
// answer, not a try's error, yet the Guard's Options.IsPermanent classified it: under one calling every
// unknown error permanent the record was REJECTED and every retry of the key got the replayed rejection
// instead of a new TCC.
func TestDTMErrorsStayRetryableUnderAStrictClassifier(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	errTransient := errors.New("transient")
	opts := k.opts
	opts.IsPermanent = func(err error) bool { return !errors.Is(err, errTransient) }
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
		abort := map[string]any{"gid": tc.Gid, "trans_type": "tcc", "rollback_reason": "aborted under the initiator"}
		if err := (&txstatus.Client{Server: k.srv.URL()}).Call(ctxb, "abort", tc.Gid, abort); err != nil {
			t.Errorf("aborting under the initiator: %v", err)
		}
		return nil
	}
	out, err := global.Run(ctxb, p)
	if out.Status != txstatus.Failed || errors.Is(err, idemkit.ErrRejected) {
		t.Fatalf("Run = %+v, %v; want the aborted transaction followed to failed", out, err)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s %q, want FAILED", rec.Status, rec.Error)
	}
	again, err := global.Run(ctxb, k.runParams(c))
	if err != nil || again.Replayed || again.Status != txstatus.Succeed {
		t.Fatalf("retry = %+v, %v: want a new TCC", again, err)
	}
}
