package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// TestCaseVariantMembersAreAMismatch: the httpx fingerprint sorted object members and
// refused only byte-identical repeats, while the handler's encoding/json matches member names
// case-insensitively and keeps the LAST one. Two bodies with the same members in another order —
// the same fingerprint — decode to different orders. The second request, for 1 apple, was
// answered with the replayed 201 of the 3-apple order; it gets 422 (found by a defect hunt).
func TestCaseVariantMembersAreAMismatch(t *testing.T) {
	_, c, ctx := stockedShop(t, "hunt", "hsku")
	// encoding/json: "QTY" and "qty" both set Qty; the last one in the document wins.
	first := json.RawMessage(`{"user_id":"hunt","sku":"hsku","qty":1,"QTY":3,"amount":100}`)  // qty 3
	second := json.RawMessage(`{"user_id":"hunt","sku":"hsku","QTY":3,"qty":1,"amount":100}`) // qty 1
	r1, err := c.do(ctx, http.MethodPost, "/api/orders", "hunt-casefold", first)
	if err != nil || r1.Status != http.StatusCreated {
		t.Fatalf("first: %v %v", r1, err)
	}
	o1, _ := r1.created()
	got1, err := c.settled(ctx, o1.OrderID, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first request created %s for qty %d", got1.OrderID, got1.Qty)

	r2, err := c.do(ctx, http.MethodPost, "/api/orders", "hunt-casefold", second)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Status != http.StatusUnprocessableEntity {
		o2, _ := r2.created()
		t.Fatalf("a request for qty 1 with the key of a qty-%d order was answered %d (replayed %v) with order %s, "+
			"not 422 payload-mismatch: the two bodies decode to different orders but share a fingerprint",
			got1.Qty, r2.Status, r2.replayed(), o2.OrderID)
	}
}
