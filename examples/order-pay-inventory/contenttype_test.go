package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/httpx"
)

// TestOrderBodyIsJSONWhateverItsContentType: the order handler decodes its body as JSON whatever the
// Content-Type says, and the README's own curl commands (curl -d) send
// application/x-www-form-urlencoded. The middleware fingerprinted such a body by its bytes, not as
// JSON: a body repeating a member was not refused (400 duplicate-member) and placed the order of the
// member's last value, and the same order sent again with its members in another order was answered
// 422 payload-mismatch instead of the replay (found by a defect hunt).
func TestOrderBodyIsJSONWhateverItsContentType(t *testing.T) {
	t.Parallel()
	svc, c, ctx := stockedShop(t, "ctype", "ctype")
	post := func(key, contentType, body string) *response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, svc.URL+"/api/orders", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(httpx.DefaultHeader, `"`+key+`"`)
		req.Header.Set("Content-Type", contentType)
		resp, err := c.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return &response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}
	for _, ct := range []string{"application/x-www-form-urlencoded", "text/plain"} {
		t.Run(ct, func(t *testing.T) {
			key := "ctype-" + randomHex(4)
			r := post(key+"-dup", ct, `{"user_id":"ctype","sku":"ctype","qty":1,"qty":5,"amount":100}`)
			if r.Status != http.StatusBadRequest || r.problemType() != "duplicate-member" {
				t.Errorf("a body repeating a member, sent as %s: %s; want 400 duplicate-member", ct, r)
			}
			first := post(key, ct, `{"user_id":"ctype","sku":"ctype","qty":1,"amount":100}`)
			if first.Status != http.StatusCreated {
				t.Fatalf("an order sent as %s: %s", ct, first)
			}
			again := post(key, ct, `{"sku":"ctype", "user_id":"ctype", "amount":100, "qty":1}`)
			if again.Status != http.StatusCreated || !again.replayed() || string(again.Body) != string(first.Body) {
				t.Errorf("the same order with its members in another order, sent as %s: %s; want the replay of %s", ct, again, first)
			}
		})
	}
}
