package txstatus

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestCallNeverSentIsNotAnUnknownOutcome: a call that could not even connect to the server (connection
// refused: DTM down) was never sent, so it certainly took no effect. It was reported as ErrNoAnswer
// ("may have taken effect"), which left a key in flight until a reconciler fenced its gid. It matches
// ErrNotSent, and neither ErrNoAnswer nor ErrRefused (DTM's own refusal, a business outcome). A call
// that reached the server and got no answer stays ErrNoAnswer.
func TestCallNeverSentIsNotAnUnknownOutcome(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now: a dial is refused
	ctx := context.Background()
	c := &Client{Server: "http://" + addr + "/api/dtmsvr", HTTP: &http.Client{Timeout: 5 * time.Second}}
	err = c.Call(ctx, "submit", "g-notsent", map[string]any{"gid": "g-notsent"})
	if !errors.Is(err, ErrNotSent) || errors.Is(err, ErrNoAnswer) || errors.Is(err, ErrRefused) {
		t.Fatalf("submit to a closed port = %v: want ErrNotSent only", err)
	}
	var op *net.OpError
	if !errors.As(err, &op) {
		t.Fatalf("submit to a closed port = %v: the dial error is not wrapped", err)
	}

	// Sent, then the connection dropped without an answer: the outcome is unknown.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	defer srv.Close()
	c = &Client{Server: srv.URL, HTTP: &http.Client{Timeout: 5 * time.Second}}
	err = c.Call(ctx, "submit", "g-dropped", map[string]any{"gid": "g-dropped"})
	if !errors.Is(err, ErrNoAnswer) || errors.Is(err, ErrNotSent) {
		t.Fatalf("submit whose connection dropped = %v: want ErrNoAnswer only", err)
	}
}
