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

// TestHeldGIDAfterAManagerBlipRunsNoHook: as TestHeldGIDRunsNoHook, but the first question whether the
// chosen gid is free fails (a gateway's 502) and the next says another transaction holds it. No hook
// runs under that gid: neither the Before hook (a second order under the other transaction's gid) nor
// the Rollback hook (which marked the other transaction's order FAILED while it ran on and succeeded).
func TestHeldGIDAfterAManagerBlipRunsNoHook(t *testing.T) {
	b := setup(t)
	orders := newHeldOrders()
	lc := orders.lifecycle(*b.lc)

	var queries atomic.Int32
	dtm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if queries.Add(1) == 1 {
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		_, _ = w.Write([]byte(`{"branches":[{"op":"compensate"},{"op":"action"}],"transaction":{"status":"submitted","trans_type":"saga"}}`))
	}))
	defer dtm.Close()
	out, err := lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("k"), Status: &txstatus.Client{Server: dtm.URL},
		GID: "held", Wait: time.Second, Result: []byte("mine"),
		Start: func(context.Context, string) error { t.Error("started"); return nil }})
	if out.Status != txstatus.Failed {
		t.Fatalf("Run = %+v, %v; want Failed", out, err)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed || rec.GID != "" {
		t.Fatalf("record %s gid %q; want FAILED without the held gid", rec.Status, rec.GID)
	}
	orders.set("held", "PAID") // the other transaction succeeds
	orders.onlyTheHeldPaid(t)
}
