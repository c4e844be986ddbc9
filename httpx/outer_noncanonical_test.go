package httpx

import (
	"io"
	"net/http"
	"slices"
	"testing"
)

// TestOuterNonCanonicalFieldReplaced: outer middleware that sets an allow-listed field under a
// non-canonical spelling (w.Header()["ETag"], as net/http documents for keeping a name's case),
// which the handler then replaces under the same spelling, sends one ETag; the middleware stored the
// replacement as a clear of the field and the new value, but the replay's clear removed only the
// canonical key, so the replay carried the outer layer's ETag and the handler's: two validators for
// one response (found by a defect hunt). A clear removes the field under every spelling now.
func TestOuterNonCanonicalFieldReplaced(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			bd := setup(t, b, nil, nil)
			h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				bd.calls.Add(1)
				w.Header()["ETag"] = []string{`"v2"`} // replaces the outer layer's default
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, `{"ok":true}`)
			}))
			outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header()["ETag"] = []string{`"default"`}
				h.ServeHTTP(w, r)
			})
			srv, client := newServer(t, outer)
			var got [][]string
			for range 2 {
				s, hd, body := send(t, client, http.MethodPost, srv.URL+"/docs", "k-etag", "{}")
				if s != http.StatusCreated || body != `{"ok":true}` {
					t.Fatalf("%d %q", s, body)
				}
				got = append(got, hd.Values("Etag"))
			}
			if !slices.Equal(got[0], []string{`"v2"`}) || !slices.Equal(got[1], got[0]) || bd.calls.Load() != 1 {
				t.Fatalf("ETag of the first response %q, of the replay %q (%d runs); want %q both times, one run", got[0], got[1], bd.calls.Load(), `"v2"`)
			}
		})
	}
}
