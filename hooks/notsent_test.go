package hooks_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// TestStartNeverSentFreesTheKey: DTM is down at the start (the connection refused): the submit was
// never sent, so nothing started. It was taken for an unknown outcome: the record was left PROCESSING
// until a Reconciler fenced the gid, and the key could never run the call again. The record is rolled
// back (FAILED, retryable: the key is free again) and Run returns an error — an outage, not a
// transaction that rolled back (found by a defect hunt).
func TestStartNeverSentFreesTheKey(t *testing.T) {
	b := setup(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String() + "/api/dtmsvr"
	_ = l.Close() // DTM is down: nothing listens there
	status := &txstatus.Client{Server: down, PollInterval: time.Millisecond}
	out, err := b.lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("notsent"), Status: status, Wait: time.Second,
		Start: func(ctx context.Context, gid string) error {
			return status.Call(ctx, "submit", gid, map[string]any{"gid": gid, "trans_type": "saga"})
		}})
	if err == nil || !errors.Is(err, txstatus.ErrNotSent) || out.Status != txstatus.Failed || !errors.Is(out.Reason, hooks.ErrRolledBack) {
		t.Fatalf("Run with DTM down at the submit = %+v, %v; want Failed (never started) and an error matching ErrNotSent", out, err)
	}
	if rec := b.status(t, "notsent"); rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s %q, want FAILED (nothing started, the key free again)", rec.Status, rec.Error)
	}
	if got := b.j.list(); len(got) != 2 || got[1] != "rollback "+out.GID {
		t.Fatalf("hooks %v, want before and rollback", got)
	}

	// DTM back: a retry with the key runs the call again.
	var started bool
	out, err = b.lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("notsent"),
		Status: dtmAnswering(t, `{"branches":[{"op":"action"}],"transaction":{"status":"succeed","trans_type":"saga"}}`),
		Wait:   time.Second, Start: func(context.Context, string) error { started = true; return nil }})
	if err != nil || !started || out.Replayed || out.Status != txstatus.Succeed {
		t.Fatalf("retry with DTM back = %+v, %v (started %v); want a new run that succeeds", out, err, started)
	}
}

// TestStartNotSentBecauseTheCallerLeft: the caller leaves (its context cancelled) before the start
// reaches DTM, and nothing is sent. The record is rolled back all the same (FAILED, the key free
// again), not left PROCESSING for the Reconciler, and Run returns an error (found by a defect hunt).
func TestStartNotSentBecauseTheCallerLeft(t *testing.T) {
	b := setup(t)
	status := dtmAnswering(t, `{"branches":[],"transaction":null}`) // a submit would fail the test
	ctx, cancel := context.WithCancel(ctxb)
	defer cancel()
	out, err := b.lc.Run(ctx, hooks.RunParams{TransType: "saga", Call: call("left"), Status: status, Wait: time.Second,
		Start: func(ctx context.Context, gid string) error {
			cancel() // the caller leaves before the submit is posted
			return status.Call(ctx, "submit", gid, map[string]any{"gid": gid, "trans_type": "saga"})
		}})
	if err == nil || !errors.Is(err, txstatus.ErrNotSent) || out.Status != txstatus.Failed {
		t.Fatalf("Run whose caller left before the submit = %+v, %v; want Failed (never started) and an error matching ErrNotSent", out, err)
	}
	if rec := b.status(t, "left"); rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s %q, want FAILED (nothing started, the key free again)", rec.Status, rec.Error)
	}
}
