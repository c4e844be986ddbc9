package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/dtmserver"
)

// TestDTMDownAtTheSubmitIsRetryable: DTM answers the initiator's question whether the order's gid is
// free, then goes down before the saga's submit (the TCC's prepare) could even connect. Nothing was
// sent, so no transaction started; but the connection refused was taken for an unknown outcome: the
// key was left in flight for the reconciler, the client answered a stored 201 PENDING, and the order
// later became FAILED with no way to create it under that key — an outage turned into the order's
// final failure. It is answered 503 (retry with the same key), and the retry, DTM back, creates and
// pays the order (found by a defect hunt).
func TestDTMDownAtTheSubmitIsRetryable(t *testing.T) {
	needDTM(t)
	srv := dtmserver.StartT(t)
	target, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	// A proxy in front of DTM that stops listening (connections refused) once it answered the
	// initiator's questions about the gid: the start finds nothing to connect to.
	var queriesLeft atomic.Int32
	var mu sync.Mutex
	var ln net.Listener
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	proxy := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rp.ServeHTTP(w, r)
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/query") && queriesLeft.Add(-1) == 0 {
			mu.Lock()
			_ = ln.Close() // down: the next call is refused at the dial
			mu.Unlock()
		}
	})}
	proxy.SetKeepAlivesEnabled(false) // every call dials anew
	listen := func(addr string) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		ln = l
		mu.Unlock()
		go func() { _ = proxy.Serve(l) }()
	}
	listen("127.0.0.1:0")
	addr := ln.Addr().String()
	t.Cleanup(func() { _ = proxy.Close() })

	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	cfg.DTM = "http://" + addr + target.Path
	svc := startServices(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newClient(svc.URL)
	if err := c.put(ctx, "/api/accounts/ds", map[string]int64{"balance": 10_000}); err != nil {
		t.Fatal(err)
	}
	if err := c.put(ctx, "/api/inventory/dssku", map[string]int64{"stock": 10}); err != nil {
		t.Fatal(err)
	}
	body := orderRequest{UserID: "ds", SKU: "dssku", Qty: 1, Amount: 100}
	for i, path := range []string{"/api/orders", "/api/orders/tcc"} {
		key := "dtm-down-at-submit" + path
		// The initiator asks twice whether the chosen gid is free (before its claim and after it);
		// DTM is down right after the second answer.
		queriesLeft.Store(2)
		r1, err := c.do(ctx, http.MethodPost, path, key, body)
		if err != nil {
			t.Fatal(err)
		}
		if r1.Status != http.StatusServiceUnavailable {
			t.Errorf("POST %s with DTM down at the start was answered %v, not 503 unavailable: nothing was sent", path, r1)
		}

		queriesLeft.Store(-1 << 30) // up for good
		listen(addr)
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
		acct, err := c.account(ctx, "ds")
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(10_000 - 100*(i+1)); acct.Balance != want {
			t.Fatalf("balance %d, want %d: each order charged once", acct.Balance, want)
		}
	}
}
