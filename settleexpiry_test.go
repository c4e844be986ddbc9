package idemkit_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
)

// TestSettledAfterTTLCountsFromTheSettlement: a record tied to a global transaction never expires
// while unsettled, but a reconciler settling it after TTL (DTM down for a while, a saga retried for
// long) wrote its outcome with the claim's expiry, over already: the retry the settlement was for ran
// the work — a second global transaction — again. The outcome counts for TTL from the settlement.
func TestSettledAfterTTLCountsFromTheSettlement(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Minute
	clk := idemtest.NewClock()
	s := memory.NewStore()
	g, err := idemkit.New(s, &idemkit.Options{Lease: 10 * time.Second, TTL: ttl, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "saga", Key: "order-1", GID: "gid-1", Result: []byte("order 1")}
	cl, _, err := g.Begin(ctx, call)
	if cl == nil {
		t.Fatal(err)
	}
	cl.Detach(ctx) // the initiator died; the transaction's outcome is the reconciler's to settle
	clk.Advance(ttl + time.Minute)
	pending, err := g.Pending(ctx, clk.Now(), 10, "saga")
	if err != nil || len(pending) != 1 {
		t.Fatalf("pending: %v, %v", pending, err)
	}
	if err := g.Settle(ctx, pending[0], nil, nil); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second) // the client's retry
	ran := false
	res, err := g.Do(ctx, call, func(context.Context) ([]byte, error) { ran = true; return []byte("order 2"), nil })
	if err != nil || ran || !res.Replayed || string(res.Value) != "order 1" {
		t.Fatalf("retry after the settlement: %+v, %v (ran again: %v); want order 1 replayed", res, err, ran)
	}
}
