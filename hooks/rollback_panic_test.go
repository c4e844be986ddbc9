package hooks_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// TestPanickingRollbackHookOfAChosenGIDStillRollsBack: a call given its gid (RunParams.GID) finds it
// free, but DTM refuses the start: another transaction took the gid meanwhile, and it then succeeds.
// Nothing of this call started, and the record is rolled back even when the Rollback hook fails,
// because a Reconciler following the gid would follow that other transaction. A Rollback hook that
// panicked instead let the panic go with the record PROCESSING under the gid: the Reconciler then
// recorded the other transaction's success for this key, none of its steps run, and every retry was
// replayed that success. The record is now rolled back before the panic goes on (found by a defect
// hunt).
func TestPanickingRollbackHookOfAChosenGIDStillRollsBack(t *testing.T) {
	b := setup(t)
	var taken atomic.Bool // the other transaction holds the gid
	dtm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !taken.Load() {
			_, _ = w.Write([]byte(`{"branches":[],"transaction":null}`))
			return
		}
		_, _ = w.Write([]byte(`{"branches":[{"op":"action"},{"op":"compensate"}],"transaction":{"status":"succeed","trans_type":"saga"}}`))
	}))
	t.Cleanup(dtm.Close)
	status := &txstatus.Client{Server: dtm.URL, PollInterval: time.Millisecond}
	lc := *b.lc
	lc.OnRollback = hooks.RollbackFunc(func(context.Context, *hooks.Txn, error) error { panic("rollback hook") })
	func() {
		defer func() {
			if v := recover(); v != "rollback hook" {
				t.Fatalf("recovered %v, want the hook's panic to go on", v)
			}
		}()
		_, _ = lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("k"), Status: status, GID: "chosen", Wait: time.Second,
			Start: func(context.Context, string) error {
				taken.Store(true)
				return &txstatus.RefusedError{Op: "submit", GID: "chosen", Message: "current status 'submitted', cannot sumbmit"}
			}})
	}()
	b.clock.Advance(2 * time.Second) // past the lease: a Reconciler lists what is left PROCESSING
	r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, Manager: status, TransType: "saga"}
	if _, err := r.RunOnce(ctxb, b.clock.Now(), 10); err != nil {
		t.Fatal(err)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s %q; want FAILED: nothing of this call started, the gid is another transaction's", rec.Status, rec.Error)
	}
}
