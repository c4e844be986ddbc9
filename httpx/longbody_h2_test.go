package httpx

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBodyPastContentLengthOverHTTP2: a handler that writes past the Content-Length it declared has
// the write refused by net/http's HTTP/1 server (http.ErrContentLength, nothing of it sent): the
// response is cut short and not stored, and the retry runs again. Its HTTP/2 server returns an error
// of its own instead, which the middleware took for a client gone away: it went on recording and
// stored the whole over-long body, so the retry of the client that got a broken response was
// answered with a body longer than the first response declared (found by a defect hunt). The write
// is refused with http.ErrContentLength on every protocol now, as over HTTP/1.
func TestBodyPastContentLengthOverHTTP2(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			bd := setup(t, b, nil, nil)
			var writeErr error
			h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				bd.calls.Add(1)
				w.Header().Set("Content-Type", "text/plain")
				w.Header().Set("Content-Length", "5")
				_, writeErr = io.WriteString(w, "hello world")
			}))
			srv := httptest.NewUnstartedServer(h)
			srv.EnableHTTP2 = true
			srv.StartTLS()
			t.Cleanup(srv.Close)
			client := srv.Client()
			for i := range 2 {
				r, _ := http.NewRequest(http.MethodPost, srv.URL+"/x", strings.NewReader("{}"))
				r.Header.Set(DefaultHeader, "k-long")
				resp, err := client.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if replayed := resp.Header.Get(ReplayedHeader); replayed != "" || writeErr != http.ErrContentLength {
					t.Fatalf("response %d: %d %q (replayed %q), the handler's write got %v; want it refused with http.ErrContentLength and nothing stored",
						i+1, resp.StatusCode, body, replayed, writeErr)
				}
			}
			if n := bd.calls.Load(); n != 2 {
				t.Fatalf("handler ran %d times, want 2 (a response cut short is not stored)", n)
			}
		})
	}
}
