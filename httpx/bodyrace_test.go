package httpx

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBodyReadInAGoroutineTheHandlerLeft: the handler reads the body in a goroutine of its own and
// returns without waiting for it, as http.TimeoutHandler does on timeout. The middleware noted the
// read's error in the goroutine and read it once the handler returned, with nothing ordering the
// two: a data race (go test -race).
func TestBodyReadInAGoroutineTheHandlerLeft(t *testing.T) {
	bd := setup(t, memoryBackend, &Options{NoFingerprint: true}, nil)
	done := make(chan struct{})
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		_, _ = io.ReadAll(r.Body)          // cut short: the client went away mid-body
		time.Sleep(300 * time.Millisecond) // slow work past the TimeoutHandler's limit
	})
	srv, _ := newServer(t, bd.mw(http.TimeoutHandler(inner, 100*time.Millisecond, "slow")))

	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k-late\r\n"+
		"Content-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"amount\":")
	_ = c.(*net.TCPConn).CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(c)
	_ = c.Close()
	if !strings.HasPrefix(string(got), "HTTP/1.1 503") {
		t.Fatalf("first answer %q; want the TimeoutHandler's 503", got)
	}
	<-done
}
