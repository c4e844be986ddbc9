package httpx

import (
	"context"
	"net/http"
	"testing"
)

// TestCancelledRequestNotRunUnguarded: with RunUnguardedOnOutage, a request whose client went away
// while the lock was being taken (its context cancelled; Redis healthy) is run with no guard at all:
// the Guard reports ErrLockUnavailable joined with context.Canceled, and the middleware checks the
// outage errors before the context's. The same cancellation met by the record store instead (no
// Locker) answers 503 and runs nothing. The client's retry then runs the business a second time.
func TestCancelledRequestNotRunUnguarded(t *testing.T) {
	bd := setup(t, memoryBackend, &Options{RunUnguardedOnOutage: true}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client is gone; nothing is down
	rec := bd.do(req("POST", "/orders", "k-gone", `{"amount":1}`).WithContext(ctx))
	if n := bd.calls.Load(); n != 0 {
		t.Fatalf("the handler ran %d time(s) unguarded for a cancelled request (status %d); Redis and the store are up", n, rec.Code)
	}
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", rec.Code)
	}
}
