package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestBodyOverTheLimitIs413: the services read bodies of at most 64 KiB, the middleware in front of
// the order routes up to 1 MiB. An order body in between was answered 400 bad-request, which the
// middleware stored as the key's answer: the client's retry with the body cut to size got 422
// payload-mismatch, while a body over 1 MiB got 413 body-too-large, stored for no key. Every body over
// the limit is 413 now, the key still free; a PUT's too (found by a defect hunt).
func TestBodyOverTheLimitIs413(t *testing.T) {
	t.Parallel()
	_, c, ctx := stockedShop(t, "big", "big")
	pad := strings.Repeat("x", maxBody) // with the members, the body is just over maxBody
	for _, tcc := range []bool{false, true} {
		key := "big-" + randomHex(4)
		big := map[string]any{"user_id": "big", "sku": "big", "qty": 1, "amount": 100, "note": pad}
		r, err := c.do(ctx, http.MethodPost, orderPath(tcc), key, big)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusRequestEntityTooLarge {
			t.Errorf("an order body over %d bytes on %s: %s; want 413", maxBody, orderPath(tcc), r)
		}
		r, err = c.do(ctx, http.MethodPost, orderPath(tcc), key, orderRequest{UserID: "big", SKU: "big", Qty: 1, Amount: 100})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusCreated || r.replayed() {
			t.Errorf("the order with the same key, its body cut to size: %s; want it placed (201)", r)
		}
	}
	for _, path := range []string{"/api/accounts/big", "/api/inventory/big"} {
		r, err := c.do(ctx, http.MethodPut, path, "", map[string]any{"note": pad})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusRequestEntityTooLarge || r.problemType() != "body-too-large" {
			t.Errorf("PUT %s with a body over %d bytes: %s; want 413 body-too-large", path, maxBody, r)
		}
	}
}
