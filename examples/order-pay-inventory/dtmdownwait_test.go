package main

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/dtmserver"
)

// TestDTMDownDuringTheWaitIsRetryable: DTM accepted the order's saga, then could not be asked about
// it (down, a gateway answering 502) while the order request waited for the outcome. The order was
// answered 201 PENDING, which the middleware stored: every retry of the key got that PENDING replayed
// for ever, whatever became of the order — and when the outage left the transaction never run (a
// submit whose answer was lost, fenced by the reconciler) or cancelled (a TCC whose tries the outage
// cut short, cancelled at its timeout), the key could not place the order again: an outage turned
// into the order's final answer. An outcome the request could not learn is answered 503 (not stored):
// the retry gets 503 until the reconciler settled the record, then the order's final 201 (found by a
// defect hunt).
func TestDTMDownDuringTheWaitIsRetryable(t *testing.T) {
	t.Parallel()
	needDTM(t)
	srv := dtmserver.StartT(t)
	dtmURL, down := gatewayTo(t, srv.URL())
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	cfg.DTM = dtmURL

	// DTM's first call of the saga (the inventory deduct) waits for release: the saga is at DTM, and
	// the order request waiting for it, when seen is closed.
	seen, release := make(chan struct{}), make(chan struct{})
	var seenOnce, releaseOnce sync.Once
	hold := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == pathInventoryDeduct {
				seenOnce.Do(func() { close(seen) })
				<-release
			}
			next.ServeHTTP(w, r)
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(tLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := Start(ctx, cfg, RunOptions{Logger: logger, BuildProgress: tLog{t}, Wrap: hold})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Close(); err != nil {
			t.Errorf("stopping the services: %v", err)
		}
	})
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before Close: no held call left

	c := newClient(svc.URL)
	const balance = 10_000
	if err := c.put(ctx, "/api/accounts/ddw", map[string]int64{"balance": balance}); err != nil {
		t.Fatal(err)
	}
	if err := c.put(ctx, "/api/inventory/ddw", map[string]int64{"stock": 10}); err != nil {
		t.Fatal(err)
	}
	body := orderRequest{UserID: "ddw", SKU: "ddw", Qty: 1, Amount: 100}
	key := "dtm-down-wait-" + randomHex(4)
	first := make(chan *response, 1)
	go func() {
		r, err := c.do(ctx, http.MethodPost, "/api/orders", key, body)
		if err != nil {
			t.Error(err)
		}
		first <- r
	}()
	select {
	case <-seen:
	case <-ctx.Done():
		t.Fatal("DTM never called the saga's first step")
	}
	down.Store(true) // the waiting request can no longer ask DTM
	r1 := <-first
	if r1 == nil {
		t.FailNow()
	}
	if r1.Status != http.StatusServiceUnavailable {
		t.Errorf("the order whose outcome DTM could not be asked about was answered %s; want 503, not a stored answer", r1)
	}
	down.Store(false)
	releaseOnce.Do(func() { close(release) }) // DTM runs the saga to its end: PAID

	deadline := time.Now().Add(time.Minute)
	for {
		r, err := c.do(ctx, http.MethodPost, "/api/orders", key, body)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == http.StatusCreated {
			got, err := r.created()
			if err != nil || got.Status != statusPaid {
				t.Fatalf("the retry, DTM back and the saga done, was answered %s; want the order, PAID", r)
			}
			break
		}
		if !r.inFlight() {
			t.Fatalf("retry: %s", r)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer to the retries: last %s", r)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if acct, err := c.account(ctx, "ddw"); err != nil || acct.Balance != balance-body.Amount || acct.Frozen != 0 {
		t.Errorf("account %+v, %v; want the order charged once", acct, err)
	}
	var n int64
	if err := svc.db.db.Raw("SELECT COUNT(*) FROM "+svc.db.tables.orders+" WHERE user_id = ?", "ddw").Scan(&n).Error; err != nil || n != 1 {
		t.Errorf("%d orders, %v; want one", n, err)
	}
}
