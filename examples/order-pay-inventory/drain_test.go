package main

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestCloseLetsOrdersInFlightFinish: Close (serve's SIGTERM: a deploy) stopped the HTTP server at
// once — its listener closed — and let the requests in progress run on, up to 10s. An order in flight
// then could not finish: DTM's calls of its branches, and the TCC's own tries, go to that listener and
// were refused, so the order waited out the wait and was answered 201 PENDING, which the middleware
// replays to every retry. Close now refuses new orders (503, nothing claimed) and waits for those in
// flight, branches still served, before it stops the server: the order is answered PAID (found by a
// defect hunt).
func TestCloseLetsOrdersInFlightFinish(t *testing.T) {
	t.Parallel()
	needDTM(t)
	for _, tccMode := range []bool{false, true} {
		name := map[bool]string{false: "saga", true: "tcc"}[tccMode]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.DataDir = t.TempDir()
			// The order's first branch call waits for release: the order is in flight when seen closes.
			first := map[bool]string{false: pathInventoryDeduct, true: pathInventoryReserve}[tccMode]
			seen, release := make(chan struct{}), make(chan struct{})
			var seenOnce, releaseOnce sync.Once
			hold := func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == first {
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
			closed := make(chan error, 1)
			var closeOnce sync.Once
			closeSvc := func() { closeOnce.Do(func() { closed <- svc.Close() }) }
			t.Cleanup(func() {
				releaseOnce.Do(func() { close(release) })
				closeSvc()
			})

			c := newClient(svc.URL)
			if err := c.put(ctx, "/api/accounts/drain", map[string]int64{"balance": 10_000}); err != nil {
				t.Fatal(err)
			}
			if err := c.put(ctx, "/api/inventory/drain", map[string]int64{"stock": 10}); err != nil {
				t.Fatal(err)
			}
			body := orderRequest{UserID: "drain", SKU: "drain", Qty: 1, Amount: 100}
			answer := make(chan *response, 1)
			go func() {
				r, err := c.do(ctx, http.MethodPost, orderPath(tccMode), "drain-"+randomHex(4), body)
				if err != nil {
					t.Error(err)
				}
				answer <- r
			}()
			select {
			case <-seen:
			case <-ctx.Done():
				t.Fatal("the order's first branch was never called")
			}
			go closeSvc()
			// Close has begun once a new order is refused: 503 while it drains, or no connection at all
			// once the server stopped.
			for {
				r, err := c.do(ctx, http.MethodPost, orderPath(tccMode), "", body)
				if err != nil || r.Status == http.StatusServiceUnavailable {
					break
				}
				if r.Status != http.StatusBadRequest {
					t.Fatalf("an order without a key before Close: %s; want 400", r)
				}
				if ctx.Err() != nil {
					t.Fatal(ctx.Err())
				}
			}
			releaseOnce.Do(func() { close(release) })
			r := <-answer
			if r == nil {
				t.FailNow()
			}
			got, err := r.created()
			if r.Status != http.StatusCreated || err != nil || got.Status != statusPaid {
				t.Errorf("the order in flight when Close began was answered %s; want 201, PAID", r)
			}
			if err := <-closed; err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}
