package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTour runs the tour as `go run ./examples/order-pay-inventory` does (tourMain, embedded defaults,
// a fresh temporary data directory) and expects every step to pass.
func TestTour(t *testing.T) {
	t.Parallel()
	needDTM(t)
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	code := tourMain(ctx, Config{Listen: DefaultTourListen}, false, &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "All 5 steps behaved as expected.") {
		t.Errorf("tour exited %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
}

// TestTourMariaDBRedis runs the same tour against MariaDB, Redis and an external DTM server.
func TestTourMariaDBRedis(t *testing.T) {
	t.Parallel()
	cfg := mariaDBConfig(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(tLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := runTour(ctx, cfg, &out, logger); err != nil {
		t.Errorf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "lock/cache Redis") {
		t.Errorf("the tour did not run on Redis:\n%s", out.String())
	}
}

// TestTourFailsLoudly breaks the services (the payment service accepts every debit) and expects the tour
// to notice, name the step and fail.
func TestTourFailsLoudly(t *testing.T) {
	t.Parallel()
	needDTM(t)
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := runTour(ctx, cfg, &out, slog.New(slog.DiscardHandler), withBrokenPayment())
	if err == nil {
		t.Fatalf("the tour passed with a broken payment service:\n%s", out.String())
	}
	t.Logf("the tour's verdict: %v", err)
	for _, want := range []string{"step 3 (An order that cannot be paid", "✗ the order is PAID"} {
		if !strings.Contains(err.Error()+out.String(), want) {
			t.Errorf("the failure does not say %q:\n%v\n%s", want, err, out.String())
		}
	}
}

// withBrokenPayment makes the payment service answer every debit with success without charging
// anything: the bug the tour must catch.
func withBrokenPayment() func(*RunOptions) {
	return func(ro *RunOptions) {
		inner := ro.Wrap
		ro.Wrap = func(next http.Handler) http.Handler {
			broken := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == pathPaymentDebit {
					writeJSON(w, http.StatusOK, map[string]string{"dtm_result": "SUCCESS"})
					return
				}
				next.ServeHTTP(w, r)
			})
			if inner != nil {
				return inner(broken)
			}
			return broken
		}
	}
}
