package httpx

import (
	"net/http"
	"net/http/httptest"
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
// HEADs; a response to another method still never stores it.
func TestHeadReplayKeepsContentLength(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			st, lk := b.new(t)
			g, err := idemkit.New(st, &idemkit.Options{Locker: lk})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(Middleware(g, &Options{Methods: []string{http.MethodPost, http.MethodHead}})(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					http.ServeContent(w, r, "report.txt", time.Time{}, strings.NewReader("hello, world"))
				})))
			defer srv.Close()
			for _, m := range []string{http.MethodHead, http.MethodPost} {
				var lengths []int64
				for i := range 2 {
					rq, _ := http.NewRequest(m, srv.URL+"/report", nil)
					rq.Header.Set(DefaultHeader, `"k-`+m+`"`)
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
				if lengths[0] != 12 || lengths[1] != 12 {
					t.Errorf("%s: Content-Length %d first, %d replayed; want 12 both times", m, lengths[0], lengths[1])
				}
			}
		})
	}
}
