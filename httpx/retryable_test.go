package httpx

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// TestUnstoredOutcomesStayRetryableUnderAStrictClassifier: a Guard whose Options.IsPermanent calls
// every error it does not know permanent (a common "only transient errors retry" rule) must not turn
// the outcomes httpx refuses to store — a 5xx by the StorePolicy, a hijacked connection, a panic —
// into REJECTED records whose retries all get 409 rejected: the retry runs the handler again.
func TestUnstoredOutcomesStayRetryableUnderAStrictClassifier(t *testing.T) {
	strict := &idemkit.Options{IsPermanent: func(error) bool { return true }}
	for _, tc := range []struct {
		name  string
		first func(w http.ResponseWriter)
	}{
		{"503", func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) }},
		{"panic", func(http.ResponseWriter) { panic(http.ErrAbortHandler) }},
		{"hijacked", func(w http.ResponseWriter) {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = c.Close()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bd := setup(t, realBackend, nil, strict)
			var calls atomic.Int64
			h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					tc.first(w)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, `{"ok":true}`)
			}))
			srv, client := newServer(t, h)
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{}`))
			req.Header.Set("Idempotency-Key", "k")
			req.Header.Set("Content-Type", "application/json")
			if resp, err := client.Do(req); err == nil { // a hijacked or aborted first call has no response
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			// The first call's claim is finished after its handler returned, which a client whose
			// connection was hijacked or aborted does not wait for: until then a retry is in flight.
			status, _, body := send(t, client, http.MethodPost, srv.URL+"/orders", "k", `{}`)
			for i := 0; i < 200 && status == http.StatusConflict && strings.Contains(body, "#in-flight"); i++ {
				time.Sleep(10 * time.Millisecond)
				status, _, body = send(t, client, http.MethodPost, srv.URL+"/orders", "k", `{}`)
			}
			if status != http.StatusCreated || body != `{"ok":true}` {
				t.Fatalf("retry after a first call that stored nothing (%s): %d %s, want the handler to run again: 201", tc.name, status, body)
			}
			if n := calls.Load(); n != 2 {
				t.Fatalf("handler ran %d times, want 2", n)
			}
		})
	}
}
