package dtmmsg_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
)

// TestReconcilerSurvivesAPanickingHook: a Commit hook that panicked while the Reconciler settled one
// message took down the sweeper's goroutine and the process with it (and again after each restart,
// at the same record). The panic is now that record's error: the other messages are settled, the
// record stays PROCESSING, and a later pass settles it once the hook works (found by a defect hunt).
func TestReconcilerSurvivesAPanickingHook(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	status := e.delivered(t, pub, "boom", 3)
	e.delivered(t, pub, "fine", 4)
	broken := true
	lc := &hooks.Lifecycle{Guard: e.w.Guard, OnCommit: hooks.CommitFunc(func(ctx context.Context, t *hooks.Txn, result []byte) error {
		if broken && t.Record.Key == "boom" {
			panic("hook bug")
		}
		return nil
	})}
	r := &dtmmsg.Reconciler{Lifecycle: lc, Barrier: e.w.Barrier, Status: status.Status,
		Pending: func(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error) {
			return e.w.Guard.Pending(ctx, now.Add(time.Hour), limit, chaosdtmmsg.Scope)
		}}
	n, err := r.RunOnce(ctxb, time.Now(), 10)
	if n != 1 || err == nil || !strings.Contains(err.Error(), "hook bug") {
		t.Fatalf("RunOnce = %d, %v; want the other message settled and an error naming the panic", n, err)
	}
	for key, want := range map[string]idemkit.Status{"boom": idemkit.StatusProcessing, "fine": idemkit.StatusSucceeded} {
		if rec, _ := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, key); rec == nil || rec.Status != want {
			t.Fatalf("record %s: %+v; want %s", key, rec, want)
		}
	}
	broken = false
	if n, err := r.RunOnce(ctxb, time.Now(), 10); n != 1 || err != nil {
		t.Fatalf("RunOnce once the hook works = %d, %v; want the record settled", n, err)
	}
	if rec, _ := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "boom"); rec == nil || rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("record boom: %+v; want SUCCEEDED", rec)
	}
}
