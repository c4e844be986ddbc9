package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/dtmserver"
)

// TestDTMDownBeforeTheStartIsRetryable: with DTM unreachable the initiator cannot learn whether the
// order's gid is free and starts nothing (the key is free again), but the order it had inserted was
// answered 201 FAILED — which the middleware stored and replayed to every retry of the key: an
// outage answered as a final business failure. It is answered 503 (retry with the same key), and
// the retry, DTM back, creates and pays the order (found by a defect hunt).
func TestDTMDownBeforeTheStartIsRetryable(t *testing.T) {
	needDTM(t)
	srv := dtmserver.StartT(t)
	dtmURL, down := gatewayTo(t, srv.URL())

	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	cfg.DTM = dtmURL
	svc := startServices(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newClient(svc.URL)
	if err := c.put(ctx, "/api/accounts/dd", map[string]int64{"balance": 10_000}); err != nil {
		t.Fatal(err)
	}
	if err := c.put(ctx, "/api/inventory/ddsku", map[string]int64{"stock": 10}); err != nil {
		t.Fatal(err)
	}
	body := orderRequest{UserID: "dd", SKU: "ddsku", Qty: 1, Amount: 100}
	for i, path := range []string{"/api/orders", "/api/orders/tcc"} {
		key := "dtm-down" + path
		down.Store(true)
		r1, err := c.do(ctx, http.MethodPost, path, key, body)
		if err != nil {
			t.Fatal(err)
		}
		if r1.Status != http.StatusServiceUnavailable {
			t.Errorf("POST %s with DTM unreachable was answered %v, not 503 unavailable: nothing started", path, r1)
		}

		down.Store(false)
		r2, err := c.do(ctx, http.MethodPost, path, key, body)
		if err != nil {
			t.Fatal(err)
		}
		o2, err := r2.created()
		if err != nil {
			t.Fatalf("POST %s again with DTM back: %v", path, err)
		}
		if r2.replayed() || o2.Status != statusPaid {
			t.Fatalf("POST %s again with DTM back was answered %v, not a new 201 PAID", path, r2)
		}
		acct, err := c.account(ctx, "dd")
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(10_000 - 100*(i+1)); acct.Balance != want {
			t.Fatalf("balance %d, want %d: each order charged once", acct.Balance, want)
		}
	}
}

// gatewayTo starts a gateway in front of the DTM server at dtm and returns the URL to reach DTM
// through it: it forwards every call until down is set, then answers 502, as a gateway in front of a
// DTM that is down does.
func gatewayTo(t *testing.T, dtm string) (string, *atomic.Bool) {
	t.Helper()
	down := new(atomic.Bool)
	return gatewayFailing(t, dtm, func(*http.Request) bool { return down.Load() }), down
}

// gatewayFailing starts a gateway in front of the DTM server at dtm and returns the URL to reach DTM
// through it: it answers 502 to the calls fail picks, and forwards the others.
func gatewayFailing(t *testing.T, dtm string, fail func(*http.Request) bool) string {
	t.Helper()
	target, err := url.Parse(dtm)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail(r) {
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	return proxy.URL + target.Path
}
