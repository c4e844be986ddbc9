package httpx

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// TestNoResponseAfterContextEndedNotStored: a handler that gives up when its request's context ends
// (select on r.Context().Done(), return) answers nothing: its client went away (or an
// http.TimeoutHandler outside answered 503). That is no response of the business's, as grpcx holds
// a handler's context error to be none; it was stored as the 200 with an empty body net/http makes of
// a handler that wrote nothing, and the client's retry got that replayed — the operation never done
// and reported a success (found by a defect hunt). A handler that wrote nothing while its context
// lived still gets its empty 200 stored and replayed. Real TCP.
func TestNoResponseAfterContextEndedNotStored(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			bd := setup(t, b, nil, nil)
			var calls atomic.Int64
			entered := make(chan struct{})
			h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/pings" {
					calls.Add(1)
					return // 200, no body: the answer while the context lives
				}
				if calls.Add(1) == 1 {
					close(entered)
					<-r.Context().Done() // the client gives up; so does the handler
					return
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, `{"order":1}`)
			}))
			srv, client := newServer(t, h)

			giveUpOnceEntered(t, client, srv.URL+"/orders", "k-gone", entered)
			var status int
			var hdr http.Header
			var body string
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				status, hdr, body = send(t, client, http.MethodPost, srv.URL+"/orders", "k-gone", `{}`)
				if status != http.StatusConflict || time.Now().After(deadline) { // 409 while the first still runs
					break
				}
			}
			if status != http.StatusCreated || body != `{"order":1}` || hdr.Get(ReplayedHeader) != "" || calls.Load() != 2 {
				t.Fatalf("retry: %d %q (replayed %q, handler ran %d times), want 201 from a second run",
					status, body, hdr.Get(ReplayedHeader), calls.Load())
			}

			for i := range 2 {
				status, hdr, body = send(t, client, http.MethodPost, srv.URL+"/pings", "k-ping", `{}`)
				if status != http.StatusOK || body != "" || (hdr.Get(ReplayedHeader) == "true") != (i == 1) {
					t.Fatalf("ping %d: %d %q (replayed %q), want an empty 200, replayed the second time", i, status, body, hdr.Get(ReplayedHeader))
				}
			}
			if n := calls.Load(); n != 3 {
				t.Fatalf("handler ran %d times, want 3", n)
			}
		})
	}
}
