package httpx

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// TestHeadReplayKeepsContentLength: a guarded HEAD (HEAD listed in Methods) answered as
// http.ServeContent answers one — Content-Length set, no body — was replayed without its
// Content-Length: in a HEAD response that field is no framing but the size of the body a GET would
// get (RFC 9110 §8.6), what a HEAD is sent for, and the replay said nothing of it (found by a defect
// hunt). A HEAD's declared Content-Length is now stored with its body-less response and replayed to
// HEADs, also when the handler wrote the body a GET gets (net/http discards it, and computes no
// length for a large one); a response to another method still never stores it.
func TestHeadReplayKeepsContentLength(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st, lk := b.new(t)
			g, err := idemkit.New(st, &idemkit.Options{Locker: lk})
			if err != nil {
				t.Fatal(err)
			}
			big := strings.Repeat("x", 5000) // past net/http's buffer: it computes no length for it
			srv := httptest.NewServer(Middleware(g, &Options{Methods: []string{http.MethodPost, http.MethodHead}})(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/big" {
						// A handler that answers HEAD as GET, writing the body net/http discards.
						w.Header().Set("Content-Length", strconv.Itoa(len(big)))
						_, _ = w.Write([]byte(big))
						return
					}
					http.ServeContent(w, r, "report.txt", time.Time{}, strings.NewReader("hello, world"))
				})))
			defer srv.Close()
			for _, c := range []struct {
				m, path string
				want    int64
			}{{http.MethodHead, "/report", 12}, {http.MethodPost, "/report", 12}, {http.MethodHead, "/big", 5000}} {
				m := c.m
				var lengths []int64
				for i := range 2 {
					rq, _ := http.NewRequest(m, srv.URL+c.path, nil)
					rq.Header.Set(DefaultHeader, `"k-`+m+c.path+`"`)
					resp, err := srv.Client().Do(rq)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || (i == 1) != (resp.Header.Get(ReplayedHeader) == "true") {
						t.Fatalf("%s %d: %d, replayed %q", m, i, resp.StatusCode, resp.Header.Get(ReplayedHeader))
					}
					lengths = append(lengths, resp.ContentLength)
				}
				if lengths[0] != c.want || lengths[1] != c.want {
					t.Errorf("%s %s: Content-Length %d first, %d replayed; want %d both times", m, c.path, lengths[0], lengths[1], c.want)
				}
			}
		})
	}
}
