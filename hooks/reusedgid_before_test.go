package hooks_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// TestReusedGIDNotFollowedDuringBeforeHook: a call given a gid that another transaction holds (it
// succeeded) starts nothing. But the record was claimed with that gid, and while the Before hook ran
// past the claim's lease a Reconciler listed it, asked DTM about the gid, found the other transaction
// succeeded, ran the Commit hook and recorded SUCCEEDED: a retry of the key was answered success
// although nothing of this call ran. Such a gid is not stored on the record, so no Reconciler follows
// it; the record ends FAILED, never started.
func TestReusedGIDNotFollowedDuringBeforeHook(t *testing.T) {
	b := setup(t)
	status := dtmAnswering(t, `{"branches":[{"op":"compensate"},{"op":"action"}],"transaction":{"status":"succeed","trans_type":"saga"}}`)
	lc := *b.lc
	r := &hooks.Reconciler{Lifecycle: &lc, Scopes: []string{"create-order"}, Manager: status, TransType: "saga"}
	lc.Before = hooks.BeforeTransactionFunc(func(ctx context.Context, tx *hooks.Txn) error {
		b.clock.Advance(2 * time.Second) // a slow hook: past the lease
		if _, err := r.RunOnce(ctx, b.clock.Now(), 10); err != nil {
			t.Errorf("reconciler: %v", err)
		}
		return b.j.add("before " + tx.GID)
	})
	out, _ := lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("k"), Status: status, GID: "reused", Wait: time.Second,
		Result: []byte("mine"), Start: func(context.Context, string) error { t.Error("started"); return nil }})
	if out.Status != txstatus.Failed {
		t.Errorf("Run = %+v; want Failed", out)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed || !strings.Contains(rec.Error, "never started") {
		t.Fatalf("record %s %q; want FAILED: nothing of this call ran", rec.Status, rec.Error)
	}
	for _, c := range b.j.list() {
		// Since TestHeldGIDRunsNoHook no hook runs for a gid held before the claim: not even the
		// Before hook, during which the Reconciler above would run.
		if strings.HasPrefix(c, "commit") || strings.HasPrefix(c, "before") {
			t.Fatalf("hooks ran: %v", b.j.list())
		}
	}
}
