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
	ctx := context.Background()
	c := closedPortClient(t)
	err := c.Call(ctx, "submit", "g-notsent", map[string]any{"gid": "g-notsent"})
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

// TestCallTimedOutBeforeConnectingIsNotSent: a DTM host that does not answer at all (powered off, or a
// firewall dropping the packets) keeps the dial waiting until the HTTP client's timeout (or the call's
// context) ends it, and net/http then returns the timeout, not the dial error: the call was taken for
// an unknown outcome although nothing was sent. A call whose transport never got a connection matches
// ErrNotSent. A transport that reports no connection at all (a custom RoundTripper without tracing)
// keeps the error classification: its timeout is an unknown outcome.
func TestCallTimedOutBeforeConnectingIsNotSent(t *testing.T) {
	ctx := context.Background()
	blackhole := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		<-ctx.Done() // SYNs unanswered: the dial waits until it is given up
		return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
	}}
	c := &Client{Server: "http://dtm.invalid:36789/api/dtmsvr", HTTP: &http.Client{Timeout: 200 * time.Millisecond, Transport: blackhole}}
	err := c.Call(ctx, "prepare", "g-blackhole", map[string]any{"gid": "g-blackhole"})
	if !errors.Is(err, ErrNotSent) || errors.Is(err, ErrNoAnswer) {
		t.Fatalf("prepare to a host that never answers the dial = %v: want ErrNotSent", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	c = &Client{Server: "http://dtm.invalid:36789/api/dtmsvr", HTTP: &http.Client{Transport: blackhole}}
	if err := c.Call(cctx, "prepare", "g-cancelled", map[string]any{"gid": "g-cancelled"}); !errors.Is(err, ErrNotSent) {
		t.Fatalf("prepare with a context ended before the call = %v: want ErrNotSent", err)
	}

	opaque := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		<-r.Context().Done() // sent, maybe, and no answer
		return nil, r.Context().Err()
	})
	c = &Client{Server: "http://dtm.invalid:36789/api/dtmsvr", HTTP: &http.Client{Timeout: 200 * time.Millisecond, Transport: opaque}}
	if err := c.Call(ctx, "prepare", "g-opaque", map[string]any{"gid": "g-opaque"}); !errors.Is(err, ErrNoAnswer) || errors.Is(err, ErrNotSent) {
		t.Fatalf("prepare through a transport that reports no connection = %v: want ErrNoAnswer", err)
	}
}

// closedPortClient returns a Client of a server address nothing listens on: a dial is refused.
func closedPortClient(t *testing.T) *Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return &Client{Server: "http://" + addr + "/api/dtmsvr", HTTP: &http.Client{Timeout: 5 * time.Second}}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestStatusNeverSentIsNotSent: Status, which an initiator asks before it starts a gid chosen up front,
// answers a server it cannot connect to with an error matching ErrNotSent, as Call does; Query, asked
// after a start, never does (its failure says nothing of whether the start was sent).
func TestStatusNeverSentIsNotSent(t *testing.T) {
	c := closedPortClient(t)
	if _, err := c.Status(context.Background(), "g-notsent"); !errors.Is(err, ErrNotSent) || errors.Is(err, ErrNoAnswer) {
		t.Fatalf("Status from a closed port = %v: want ErrNotSent", err)
	}
	if _, err := c.Query(context.Background(), "g-notsent"); err == nil || errors.Is(err, ErrNotSent) {
		t.Fatalf("Query from a closed port = %v: want an error that is not ErrNotSent", err)
	}
	// Answered, but not DTM's answer: an error, not ErrNotSent.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}))
	defer srv.Close()
	c.Server = srv.URL
	if _, err := c.Status(context.Background(), "g-gw"); err == nil || errors.Is(err, ErrNotSent) {
		t.Fatalf("Status through a failing gateway = %v: want an error that is not ErrNotSent", err)
	}
}
