package httpx

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// TestWatchdogCancellationIsUnavailable: when the Guard's watchdog cancels a handler (MaxHold ran
// out, or the lock was lost) and the handler gives up answering nothing, as a handler watching its
// context does, the claim was released but the client — still there, it cancelled nothing — got the
// empty 200 net/http makes of a handler that wrote nothing: a success for work that was abandoned, so
// it never retried. It gets 503 unavailable now (grpcx answers UNAVAILABLE alike), and its retry runs
// again (found by a defect hunt).
func TestWatchdogCancellationIsUnavailable(t *testing.T) {
	var runs atomic.Int64
	guard := memoryGuard(t, &idemkit.Options{Watchdog: true, MaxHold: 50 * time.Millisecond, Lease: 150 * time.Millisecond})
	h := Middleware(guard, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		select {
		case <-r.Context().Done():
			return // gives up, answering nothing
		case <-time.After(20 * time.Second):
			w.WriteHeader(http.StatusCreated)
		}
	}))
	srv, client := newServer(t, h)
	for i := range 2 {
		status, hdr, body := send(t, client, "POST", srv.URL+"/orders", "k-hold-1", `{"amount":1}`)
		if status != http.StatusServiceUnavailable || hdr.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("call %d: %d %q, want 503 problem+json", i+1, status, body)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (nothing stored)", n)
	}
}
