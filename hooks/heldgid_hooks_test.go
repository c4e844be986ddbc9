package hooks_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// TestHeldGIDRunsNoHook: a call given a gid that another transaction already holds (a gid derived
// from a business id, reused by a second call) starts nothing, and no hook runs for it: the hooks
// are keyed by the gid (the README's "UPDATE orders SET status = ? WHERE gid = ? AND status =
// 'PENDING'"), so its Before hook inserted a second order under the other transaction's gid and its
// Rollback hook marked both FAILED — the other transaction's order too, while that transaction ran on
// and succeeded: its Commit hook then found no PENDING order, and a paid order stayed FAILED.
func TestHeldGIDRunsNoHook(t *testing.T) {
	b := setup(t)
	// The orders table of the README's example: rows keyed by gid, moved out of PENDING once.
	var mu sync.Mutex
	type order struct{ gid, status string }
	orders := []*order{{"held", "PENDING"}} // the other transaction's order, still running
	set := func(gid, status string) {
		mu.Lock()
		defer mu.Unlock()
		for _, o := range orders {
			if o.gid == gid && o.status == "PENDING" {
				o.status = status
			}
		}
	}
	lc := *b.lc
	lc.Before = hooks.BeforeTransactionFunc(func(_ context.Context, t *hooks.Txn) error {
		mu.Lock()
		defer mu.Unlock()
		orders = append(orders, &order{t.GID, "PENDING"})
		return nil
	})
	lc.OnCommit = hooks.CommitFunc(func(_ context.Context, t *hooks.Txn, _ []byte) error { set(t.GID, "PAID"); return nil })
	lc.OnRollback = hooks.RollbackFunc(func(_ context.Context, t *hooks.Txn, _ error) error { set(t.GID, "FAILED"); return nil })

	status := dtmAnswering(t, `{"branches":[{"op":"compensate"},{"op":"action"}],"transaction":{"status":"submitted","trans_type":"saga"}}`)
	out, err := lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("k"), Status: status, GID: "held", Wait: time.Second,
		Result: []byte("mine"), Start: func(context.Context, string) error { t.Error("started"); return nil }})
	if err != nil || out.Status != txstatus.Failed {
		t.Fatalf("Run = %+v, %v; want Failed", out, err)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s %q; want FAILED", rec.Status, rec.Error)
	}
	// The other transaction succeeds: its order is PAID.
	set("held", "PAID")
	mu.Lock()
	defer mu.Unlock()
	if len(orders) != 1 || orders[0].status != "PAID" {
		var got []order
		for _, o := range orders {
			got = append(got, *o)
		}
		t.Fatalf("orders %+v; want only the other transaction's, PAID", got)
	}
}
