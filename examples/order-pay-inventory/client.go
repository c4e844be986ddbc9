package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idemkit/httpx"
)

// client calls the services' public API; the tour and the tests use it.
type client struct {
	base string
	http *http.Client
}

func newClient(base string) *client {
	return &client{base: base, http: &http.Client{Timeout: 30 * time.Second}}
}

// response is an answer as the client saw it.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// replayed reports whether the middleware answered from its record.
func (r *response) replayed() bool { return r.Header.Get(httpx.ReplayedHeader) == "true" }

// created decodes a 201 body.
func (r *response) created() (created, error) {
	var c created
	if r.Status != http.StatusCreated {
		return c, fmt.Errorf("status %d: %s", r.Status, strings.TrimSpace(string(r.Body)))
	}
	if err := json.Unmarshal(r.Body, &c); err != nil {
		return c, fmt.Errorf("decoding %q: %w", r.Body, err)
	}
	return c, nil
}

// problemType returns the last part of a problem+json type ("payload-mismatch"), or "".
func (r *response) problemType() string {
	var p problem
	if json.Unmarshal(r.Body, &p) != nil {
		return ""
	}
	if i := strings.LastIndexAny(p.Type, "#/"); i >= 0 {
		return p.Type[i+1:]
	}
	return p.Type
}

// inFlight reports an answer that means "the same key is being processed: retry later".
func (r *response) inFlight() bool {
	return r.Status == http.StatusConflict && r.problemType() == "in-flight" ||
		r.Status == http.StatusServiceUnavailable
}

// String is a one-line description: status, the replay header and the body (a problem's type and
// detail only).
func (r *response) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", r.Status, http.StatusText(r.Status))
	if r.replayed() {
		b.WriteString(", Idempotent-Replayed: true")
	}
	if ra := r.Header.Get("Retry-After"); ra != "" {
		b.WriteString(", Retry-After: " + ra)
	}
	body := strings.TrimSpace(string(r.Body))
	var p problem
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") && json.Unmarshal(r.Body, &p) == nil {
		body = "problem " + r.problemType()
		if p.Detail != "" {
			body += ": " + p.Detail
		}
	}
	if len(body) > 300 {
		body = body[:300] + "..."
	}
	if body != "" {
		b.WriteString("  " + body)
	}
	return b.String()
}

// do sends one request; key is the Idempotency-Key ("" for none) and body is encoded as JSON.
func (c *client) do(ctx context.Context, method, path, key string, body any) (*response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(httpx.DefaultHeader, `"`+key+`"`) // a Structured Field String, as the draft says
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	return &response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// getJSON decodes a 200 answer to GET path into v.
func (c *client) getJSON(ctx context.Context, path string, v any) error {
	r, err := c.do(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		return err
	}
	if r.Status != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, r)
	}
	return json.Unmarshal(r.Body, v)
}

func (c *client) account(ctx context.Context, user string) (account, error) {
	var a account
	return a, c.getJSON(ctx, "/api/accounts/"+user, &a)
}

func (c *client) item(ctx context.Context, sku string) (item, error) {
	var it item
	return it, c.getJSON(ctx, "/api/inventory/"+sku, &it)
}

func (c *client) order(ctx context.Context, id string) (order, error) {
	var o order
	return o, c.getJSON(ctx, "/api/orders/"+id, &o)
}

// put sets up an account balance or a SKU's stock.
func (c *client) put(ctx context.Context, path string, body any) error {
	r, err := c.do(ctx, http.MethodPut, path, "", body)
	if err != nil {
		return err
	}
	if r.Status != http.StatusOK {
		return fmt.Errorf("PUT %s: %s", path, r)
	}
	return nil
}

// orderPath is the endpoint of a saga (tcc false) or TCC order.
func orderPath(tcc bool) string {
	if tcc {
		return "/api/orders/tcc"
	}
	return "/api/orders"
}

// settled polls an order until it is no longer PENDING or wait passes, and returns it as last seen.
func (c *client) settled(ctx context.Context, id string, wait time.Duration) (order, error) {
	deadline := time.Now().Add(wait)
	for {
		o, err := c.order(ctx, id)
		if err != nil || o.Status != statusPending || time.Now().After(deadline) {
			return o, err
		}
		select {
		case <-ctx.Done():
			return o, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
