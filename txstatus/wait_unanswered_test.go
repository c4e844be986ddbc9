package txstatus

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestWaitNeverAnsweredIsAnError: Wait's doc says "when ctx ends first it returns that status
// (not final) and no error, so a caller can tell 'still running' from 'could not ask'". A DTM that
// answered no query at all (every poll a 502) until ctx ended now gives Status Unknown ("the server
// has no transaction with gid") and a nil error, as long as fewer than waitTolerance polls fit in
// ctx: "could not ask" reads as "no such transaction". Before the change the first failure was
// returned.
func TestWaitNeverAnsweredIsAnError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}))
	defer srv.Close()
	// Poll interval far above the wait: exactly one query is made before ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	st, err := (&Client{Server: srv.URL, PollInterval: time.Hour}).Wait(ctx, "g")
	if err == nil {
		t.Fatalf("Wait = %q, nil after no query was answered: want an error (could not ask)", st)
	}
}
