package saga_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestUnreachableDTMWithAChosenGIDIsNotSent: DTM is down (the connection refused) when a saga is
// submitted with a gid chosen up front, as the README's and docs/DTM.md's initiators do
// (SubmitParams.GID: txstatus.NewGID(), so the result can carry it). Nothing was sent and nothing
// started, as when the submit itself could not connect: the record is rolled back (FAILED, the key
// free again) and the error matches txstatus.ErrNotSent. It did not: the question whether the gid is
// free, asked before the submit, failed first, and its error matched neither ErrNotSent nor anything
// else the docs name for an unreachable DTM (found by a defect hunt).
func TestUnreachableDTMWithAChosenGIDIsNotSent(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String() + "/api/dtmsvr"
	_ = l.Close() // DTM is down: nothing listens there
	init := &saga.Initiator{Server: down, Lifecycle: k.lc, Wait: time.Second}
	c := newCall()
	for _, gid := range []string{"", txstatus.NewGID()} {
		out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, GID: gid, Steps: k.addSteps, Result: []byte("ok")})
		if !errors.Is(err, txstatus.ErrNotSent) || out.Status != txstatus.Failed || !errors.Is(out.Reason, hooks.ErrRolledBack) ||
			!errors.Is(out.Reason, txstatus.ErrNotSent) {
			t.Fatalf("Submit (gid %q) with DTM down = %+v, %v; want Failed (never started) and an error matching ErrNotSent", gid, out, err)
		}
		if rec := k.record(t, c); rec.Status != idemkit.StatusFailed {
			t.Fatalf("record %s %q, want FAILED (nothing started, the key free again)", rec.Status, rec.Error)
		}
	}
	// DTM back: the key runs.
	out, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, GID: txstatus.NewGID(), Steps: k.addSteps, Result: []byte("ok")})
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("retry with DTM back = %+v, %v", out, err)
	}
	k.checkBalances(t, amount)
}
