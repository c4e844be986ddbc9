package txstatus

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestNegativePollInterval: a negative PollInterval was taken as is, and Wait queried DTM again at
// once after every answer, as fast as it answered, until ctx ended. It is refused with an error
// naming it, before any query.
func TestNegativePollInterval(t *testing.T) {
	var queries atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries.Add(1)
		_, _ = w.Write([]byte(`{"transaction":{"status":"submitted"}}`))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	st, err := (&Client{Server: srv.URL, PollInterval: -time.Second}).Wait(ctx, "g")
	if err == nil || !strings.Contains(err.Error(), "PollInterval") {
		t.Fatalf("Wait with a negative PollInterval = %q, %v after %d queries; want an error naming PollInterval", st, err, queries.Load())
	}
	if n := queries.Load(); n != 0 {
		t.Fatalf("%d queries sent with an invalid PollInterval", n)
	}
}
