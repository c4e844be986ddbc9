package idemkit_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestUnsettledTransactionOutlivesTTL: a record tied to a global transaction that nobody settled is
// neither taken over nor forgotten when its TTL passes — a retry would start a second transaction —
// and the reconciler still lists it (issue 11, item 10a).
func TestUnsettledTransactionOutlivesTTL(t *testing.T) {
	b := setup(t, func(o *idemkit.Options) { o.TTL = time.Minute })
	call := idemkit.Call{Scope: "pay", Key: "k", GID: "gid-1"}
	cl, _, err := b.g.Begin(ctxb, call)
	if err != nil {
		t.Fatal(err)
	}
	cl.Detach(ctxb) // the initiator died; the transaction goes on at the manager
	b.clock.Advance(2 * time.Hour)

	ran := false
	_, err = b.g.Do(ctxb, call, func(ctx context.Context) ([]byte, error) { ran = true; return nil, nil })
	if !errors.Is(err, idemkit.ErrInFlight) || ran {
		t.Fatalf("retry past the TTL of an unsettled transaction: ran=%v err=%v, want ErrInFlight without running", ran, err)
	}
	if n, err := b.store.DeleteExpired(ctxb, b.clock.Now(), 10); n != 0 || err != nil {
		t.Fatalf("the sweeper deleted %d unsettled records (%v)", n, err)
	}
	recs, err := b.g.Pending(ctxb, b.clock.Now(), 10, "pay")
	if err != nil || len(recs) != 1 || recs[0].GID != "gid-1" {
		t.Fatalf("Pending = %+v, %v; want the unsettled record", recs, err)
	}
	if err := b.g.Settle(ctxb, recs[0], nil, nil); err != nil {
		t.Fatal(err)
	}
	// Settled, it expires like any other record: TTL after it was written (its claim's TTL long
	// over, the retry the settlement answers would otherwise run it again).
	if n, err := b.store.DeleteExpired(ctxb, b.clock.Now(), 10); n != 0 || err != nil {
		t.Fatalf("DeleteExpired right after settling: %d, %v", n, err)
	}
	b.clock.Advance(time.Minute)
	if n, err := b.store.DeleteExpired(ctxb, b.clock.Now(), 10); n != 1 || err != nil {
		t.Fatalf("DeleteExpired after settling: %d, %v", n, err)
	}
}

// TestPendingOnlyOwnScopes: a Guard lists only its own namespace's records of the scopes asked for
// (issue 11, item 10b).
func TestPendingOnlyOwnScopes(t *testing.T) {
	store := memory.NewStore()
	guard := func(ns string) *idemkit.Guard {
		g, err := idemkit.New(store, &idemkit.Options{Namespace: ns, Lease: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	billing, shipping := guard("billing"), guard("shipping")
	for _, c := range []struct {
		g     *idemkit.Guard
		scope string
	}{{billing, "orders"}, {billing, "refunds"}, {shipping, "orders"}} {
		cl, _, err := c.g.Begin(ctxb, idemkit.Call{Scope: c.scope, Key: "k", GID: "g-" + c.scope})
		if err != nil {
			t.Fatal(err)
		}
		cl.Detach(ctxb)
	}
	now := time.Now().Add(time.Second)
	recs, err := billing.Pending(ctxb, now, 10, "orders")
	if err != nil || len(recs) != 1 || recs[0].Scope != "billing/orders" {
		t.Fatalf("billing orders: %+v, %v", recs, err)
	}
	recs, err = shipping.Pending(ctxb, now, 10, "orders", "refunds")
	if err != nil || len(recs) != 1 || recs[0].Scope != "shipping/orders" {
		t.Fatalf("shipping: %+v, %v", recs, err)
	}
	if _, err := billing.Pending(ctxb, now, 10); err == nil {
		t.Fatal("Pending without scopes: want an error")
	}
	if _, err := billing.Pending(ctxb, now, 10, ""); !errors.Is(err, idemkit.ErrInvalidKey) {
		t.Fatalf("Pending with an empty scope: %v, want ErrInvalidKey", err)
	}
}

// TestCallResultStoredWithClaim: a result given with the claim is what a success without a value of
// its own stores, whoever settles it (issue 11, item 1).
func TestCallResultStoredWithClaim(t *testing.T) {
	b := setup(t, nil)
	call := idemkit.Call{Scope: "s", Key: "k", GID: "g", Result: []byte(`{"order":7}`)}
	cl, _, err := b.g.Begin(ctxb, call)
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := b.store.Get(ctxb, "s", "k"); !bytes.Equal(rec.Response, call.Result) || rec.Status != idemkit.StatusProcessing {
		t.Fatalf("claimed record: %+v, want the result stored with the claim", rec)
	}
	cl.Detach(ctxb)
	b.clock.Advance(time.Minute)
	recs, err := b.g.Pending(ctxb, b.clock.Now(), 10, "s")
	if err != nil || len(recs) != 1 {
		t.Fatalf("Pending: %v, %v", recs, err)
	}
	if err := b.g.Settle(ctxb, recs[0], nil, nil); err != nil { // a reconciler knows only the outcome
		t.Fatal(err)
	}
	res, err := b.g.Do(ctxb, call, ok("other"))
	if err != nil || !res.Replayed || string(res.Value) != `{"order":7}` {
		t.Fatalf("replay after a reconciler settled: %+v, %v", res, err)
	}

	// The process that claimed it finishes it itself: the first answer carries the result too.
	call.Key = "k2"
	cl, _, err = b.g.Begin(ctxb, call)
	if err != nil {
		t.Fatal(err)
	}
	res, err = cl.Finish(ctxb, nil, nil)
	if err != nil || string(res.Value) != `{"order":7}` {
		t.Fatalf("Finish without a value: %+v, %v", res, err)
	}
}
