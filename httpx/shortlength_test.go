package httpx

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestShortContentLengthNotStored: a handler that declares a Content-Length and writes less — it
// copies an upstream body that breaks off midway — sends a response net/http cannot complete: the
// connection is closed and the client gets an error. The retry must not be answered with what was
// written as if it were the whole response (found by a defect hunt: it got the cut body, 200,
// Idempotent-Replayed, with a Content-Length of its own). A HEAD response, or a 204/304, declares a
// length it has no body for: that is stored as usual.
func TestShortContentLengthNotStored(t *testing.T) {
	const full = "0123456789"
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			bd := setup(t, b, &Options{Methods: []string{http.MethodPost, http.MethodHead}}, nil)
			h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := bd.calls.Add(1)
				w.Header().Set("Content-Type", "text/plain")
				w.Header().Set("Content-Length", strconv.Itoa(len(full)))
				if r.Method == http.MethodHead || r.URL.Path == "/not-modified" {
					if r.URL.Path == "/not-modified" {
						w.WriteHeader(http.StatusNotModified)
					}
					return
				}
				if n == 1 {
					_, _ = io.WriteString(w, full[:4]) // the upstream broke off here
					return
				}
				_, _ = io.WriteString(w, full)
			}))
			srv, client := newServer(t, h)

			r, _ := http.NewRequest(http.MethodPost, srv.URL+"/files", strings.NewReader(`{}`))
			r.Header.Set(DefaultHeader, "k-short")
			if resp, err := client.Do(r); err == nil {
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil {
					t.Fatalf("first response arrived whole: %d %q", resp.StatusCode, body)
				}
			}
			s, hd, body := send(t, client, http.MethodPost, srv.URL+"/files", "k-short", `{}`)
			if s != http.StatusOK || body != full || hd.Get(ReplayedHeader) != "" || bd.calls.Load() != 2 {
				t.Fatalf("retry: %d %q (replayed %q, handler ran %d times), want 200 %q from a second run",
					s, body, hd.Get(ReplayedHeader), bd.calls.Load(), full)
			}

			for _, c := range []struct{ method, path string }{{http.MethodHead, "/files"}, {http.MethodPost, "/not-modified"}} {
				before := bd.calls.Load()
				for i := range 2 {
					r, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
					r.Header.Set(DefaultHeader, "k-nobody")
					resp, err := client.Do(r)
					if err != nil {
						t.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if i == 1 && resp.Header.Get(ReplayedHeader) != "true" {
						t.Errorf("%s %s: the duplicate got %d unreplayed; want the stored response", c.method, c.path, resp.StatusCode)
					}
				}
				if n := bd.calls.Load() - before; n != 1 {
					t.Errorf("%s %s: handler ran %d times for one key, want 1", c.method, c.path, n)
				}
			}
		})
	}
}
