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
	orders := newHeldOrders()
	lc := orders.lifecycle(*b.lc)

	status := dtmAnswering(t, `{"branches":[{"op":"compensate"},{"op":"action"}],"transaction":{"status":"submitted","trans_type":"saga"}}`)
	out, err := lc.Run(ctxb, hooks.RunParams{TransType: "saga", Call: call("k"), Status: status, GID: "held", Wait: time.Second,
		Result: []byte("mine"), Start: func(context.Context, string) error { t.Error("started"); return nil }})
	if err != nil || out.Status != txstatus.Failed {
		t.Fatalf("Run = %+v, %v; want Failed", out, err)
	}
	if rec := b.status(t, "k"); rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s %q; want FAILED", rec.Status, rec.Error)
	}
	orders.set("held", "PAID") // the other transaction succeeds
	orders.onlyTheHeldPaid(t)
}

// heldOrders is the orders table of the README's example: rows keyed by gid, moved out of PENDING
// once, holding the order of another transaction, gid "held", still running.
type heldOrders struct {
	mu   sync.Mutex
	rows []*heldOrder
}

type heldOrder struct{ gid, status string }

func newHeldOrders() *heldOrders { return &heldOrders{rows: []*heldOrder{{"held", "PENDING"}}} }

// set moves the PENDING order of gid to status.
func (o *heldOrders) set(gid, status string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.rows {
		if r.gid == gid && r.status == "PENDING" {
			r.status = status
		}
	}
}

// lifecycle returns lc with the example's hooks on the table: Before inserts a PENDING order, Commit
// pays it, Rollback fails it.
func (o *heldOrders) lifecycle(lc hooks.Lifecycle) hooks.Lifecycle {
	lc.Before = hooks.BeforeTransactionFunc(func(_ context.Context, t *hooks.Txn) error {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.rows = append(o.rows, &heldOrder{t.GID, "PENDING"})
		return nil
	})
	lc.OnCommit = hooks.CommitFunc(func(_ context.Context, t *hooks.Txn, _ []byte) error { o.set(t.GID, "PAID"); return nil })
	lc.OnRollback = hooks.RollbackFunc(func(_ context.Context, t *hooks.Txn, _ error) error { o.set(t.GID, "FAILED"); return nil })
	return lc
}

// onlyTheHeldPaid fails t unless the table holds the other transaction's order alone, PAID.
func (o *heldOrders) onlyTheHeldPaid(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.rows) != 1 || o.rows[0].status != "PAID" {
		var got []heldOrder
		for _, r := range o.rows {
			got = append(got, *r)
		}
		t.Fatalf("orders %+v; want only the other transaction's, PAID", got)
	}
}
