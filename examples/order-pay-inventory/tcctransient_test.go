package main

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// TestTCCTryOutageIsNotTheOrdersAnswer: a TCC order whose inventory try failed for a moment (the
// service answering 503, as a gateway does while it restarts) is cancelled by DTM, its order FAILED.
// That is no refusal: the try's error is not permanent, the initiator's record is FAILED so that a retry
// of the key places the order anew (see tries). The order request answered 201 FAILED, which the
// middleware stored and replayed to every retry: an outage became the order's final answer. It is
// answered 503 (not stored): the retry places the order, charged once (found by a defect hunt).
func TestTCCTryOutageIsNotTheOrdersAnswer(t *testing.T) {
	t.Parallel()
	needDTM(t)
	cfg := testConfig()
	cfg.DataDir = t.TempDir()

	// The first call of the inventory try answers 503 without reaching the service.
	var failed atomic.Bool
	flaky := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == pathInventoryReserve && failed.CompareAndSwap(false, true) {
				http.Error(w, "inventory restarting", http.StatusServiceUnavailable)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(tLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := Start(ctx, cfg, RunOptions{Logger: logger, BuildProgress: tLog{t}, Wrap: flaky})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Close(); err != nil {
			t.Errorf("stopping the services: %v", err)
		}
	})
	c := newClient(svc.URL)
	const balance, stock = 10_000, 10
	if err := c.put(ctx, "/api/accounts/tto", map[string]int64{"balance": balance}); err != nil {
		t.Fatal(err)
	}
	if err := c.put(ctx, "/api/inventory/tto", map[string]int64{"stock": stock}); err != nil {
		t.Fatal(err)
	}
	body := orderRequest{UserID: "tto", SKU: "tto", Qty: 2, Amount: 300}
	key := "tcc-try-outage-" + randomHex(4)
	r1, err := c.do(ctx, http.MethodPost, orderPath(true), key, body)
	if err != nil {
		t.Fatal(err)
	}
	if !failed.Load() {
		t.Fatal("the inventory try was never called")
	}
	if r1.Status != http.StatusServiceUnavailable {
		t.Errorf("the order whose try failed for a moment was answered %s; want 503, not a stored answer", r1)
	}

	var placed created
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := c.do(ctx, http.MethodPost, orderPath(true), key, body)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == http.StatusCreated {
			if placed, err = r.created(); err != nil {
				t.Fatal(err)
			}
			break
		}
		if r.Status != http.StatusServiceUnavailable {
			t.Fatalf("retry: %s", r)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer to the retries: last %s", r)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if placed.Status != statusPaid {
		t.Errorf("the retry, the inventory service back, was answered %+v; want the order placed, PAID", placed)
	}
	if acct, err := c.account(ctx, "tto"); err != nil || acct.Balance != balance-body.Amount || acct.Frozen != 0 {
		t.Errorf("account %+v, %v; want the order charged once, nothing frozen", acct, err)
	}
	if it, err := c.item(ctx, "tto"); err != nil || it.Stock != stock-body.Qty || it.Reserved != 0 {
		t.Errorf("inventory %+v, %v; want the order's quantity taken once, nothing reserved", it, err)
	}
	var paid int64
	if err := svc.db.db.Raw("SELECT COUNT(*) FROM "+svc.db.tables.orders+" WHERE user_id = ? AND status = ?", "tto", statusPaid).Scan(&paid).Error; err != nil || paid != 1 {
		t.Errorf("%d PAID orders, %v; want one", paid, err)
	}
}
