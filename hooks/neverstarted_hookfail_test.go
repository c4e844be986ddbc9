package hooks_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// TestNeverStartedIsNotLeftToTheReconciler: a call given a gid that another transaction holds (reused,
// or taken by a concurrent call between Run's question and its start) starts nothing, and its record is
// rolled back. When the Rollback hook fails then, the record was left PROCESSING for the Reconciler,
// which asked DTM about the gid, found the other transaction succeeded, ran the Commit hook and
// recorded SUCCEEDED — with this call's result, although nothing of it ran: a retry of the key was
// answered success. The record is FAILED all the same, and Run returns the hook's error.
func TestNeverStartedIsNotLeftToTheReconciler(t *testing.T) {
	const other = `{"branches":[{"op":"compensate"},{"op":"action"}],"transaction":{"status":"succeed","trans_type":"saga"}}`
	for _, tc := range []struct {
		name    string
		refused bool // the gid was free when Run asked, and DTM refused the start
	}{{"held before the start", false}, {"taken before the start", true}} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			var started atomic.Bool // the other transaction takes the gid when this call starts
			dtm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.refused && !started.Load() {
					_, _ = w.Write([]byte(`{"branches":[],"transaction":null}`))
					return
				}
				_, _ = w.Write([]byte(other))
			}))
			defer dtm.Close()
			status := &txstatus.Client{Server: dtm.URL, PollInterval: time.Millisecond}
			lc := *b.lc
			hookDown := errors.New("orders table down")
			lc.OnRollback = hooks.RollbackFunc(func(ctx context.Context, t *hooks.Txn, reason error) error {
				_ = b.j.add("rollback " + t.GID)
				return hookDown
			})
			out, err := lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("k"), Status: status, GID: "reused",
				Wait: time.Second, Result: []byte("mine"),
				Start: func(context.Context, string) error {
					started.Store(true)
					return &txstatus.RefusedError{Op: "submit", GID: "reused", Message: "current status 'succeed', cannot sumbmit"}
				}})
			switch {
			case started.Load() != tc.refused || out.Status != txstatus.Failed:
				t.Fatalf("Run = %+v, %v (started %v); want Failed", out, err, started.Load())
			case tc.refused && !errors.Is(err, hookDown):
				t.Fatalf("Run: %v; want the hook's error", err)
			case !tc.refused && (err != nil || len(b.j.list()) != 0):
				// A gid held before the claim is another transaction's: no hook runs for it (see
				// TestHeldGIDRunsNoHook), so none fails.
				t.Fatalf("Run: %v, hooks %v; want no hook run and no error", err, b.j.list())
			}

			b.clock.Advance(2 * time.Second) // past the lease
			r := &hooks.Reconciler{Lifecycle: &lc, Scopes: []string{"create-order"}, Manager: status, TransType: "saga"}
			_, _ = r.RunOnce(ctxb, b.clock.Now(), 10)
			if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed || !strings.Contains(rec.Error, "never started") {
				t.Fatalf("record %s %q; want FAILED: nothing of this call ran", rec.Status, rec.Error)
			}
			for _, c := range b.j.list() {
				if strings.HasPrefix(c, "commit") {
					t.Fatalf("hooks ran: %v", b.j.list())
				}
			}
		})
	}
}

// TestNeverStartedHookFailureWhenSettledByAnother: when the Rollback hook of a start that never
// happened fails and the record cannot be rolled back either (another settled it meanwhile), Run's
// error must not say that the record was rolled back all the same. (The gid is free when Run claims
// the record, so the hooks run — for a gid held before the claim none does — and the manager cannot
// be asked whether it is still free; while the hook fails, past the lease, a Reconciler settles the
// record.)
func TestNeverStartedHookFailureWhenSettledByAnother(t *testing.T) {
	b := setup(t)
	var asked atomic.Int32
	dtm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) == 1 {
			_, _ = w.Write([]byte(`{"branches":[],"transaction":null}`))
			return
		}
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}))
	defer dtm.Close()
	status := &txstatus.Client{Server: dtm.URL, PollInterval: time.Millisecond}
	lc := *b.lc
	r := &hooks.Reconciler{Lifecycle: &lc, Scopes: []string{"create-order"},
		Manager: &fakeManager{statuses: map[string]txstatus.Status{}}, TransType: "saga"}
	hookDown := errors.New("orders table down")
	var reconciling atomic.Bool
	lc.OnRollback = hooks.RollbackFunc(func(ctx context.Context, tx *hooks.Txn, reason error) error {
		if !reconciling.CompareAndSwap(false, true) {
			return nil // the Reconciler's run of the hook
		}
		b.clock.Advance(2 * time.Second) // past the lease: a Reconciler settles the record
		if n, err := r.RunOnce(ctx, b.clock.Now(), 10); n != 1 || err != nil {
			t.Errorf("the Reconciler settled %d: %v", n, err)
		}
		return hookDown
	})
	_, err := lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("k"), Status: status, GID: "mine", Wait: time.Second,
		Result: []byte("mine"), Start: func(context.Context, string) error { t.Error("started"); return nil }})
	if !errors.Is(err, hookDown) || !strings.Contains(err.Error(), "settling the record") {
		t.Fatalf("Run: %v; want the hook's error and the fenced settlement", err)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed || !strings.Contains(rec.Error, txstatus.FenceReason) {
		t.Fatalf("record %s %q; want the Reconciler's", rec.Status, rec.Error)
	}
	if strings.Contains(err.Error(), "rolled back all the same") {
		t.Fatalf("Run: %v; says the record was rolled back by Run, but another settled it", err)
	}
}
