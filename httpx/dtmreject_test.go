package httpx

import (
	"net/http"
	"testing"
)

// TestDTMDuplicateOfUnreplayableKeepsStatus: on a DTM route, a duplicate of a stored non-2xx response
// that cannot be replayed (Reject, or too large to store) keeps the original status, which is what
// DTM acts on: a 400 (DTM retries) answered 409 made DTM read FAILURE and roll the branch back.
// Real TCP, MariaDB and Redis.
func TestDTMDuplicateOfUnreplayableKeepsStatus(t *testing.T) {
	for name, opts := range map[string]*Options{
		"reject":    {DTM: true, Duplicates: Reject},
		"too large": {DTM: true, MaxResponseBytes: 10},
	} {
		t.Run(name, func(t *testing.T) {
			bd := setup(t, realBackend, opts, nil)
			srv, client := newServer(t, bd.handler)
			if s, _, b := send(t, client, http.MethodPost, srv.URL+"/branch", "k", `{}`, "X-Test-Status", "400", "X-Test-Size", "100"); s != 400 {
				t.Fatalf("first call: %d %s", s, b)
			}
			if s, _, b := send(t, client, http.MethodPost, srv.URL+"/branch", "k", `{}`); s != 400 {
				t.Fatalf("duplicate: %d %s, want the original 400 (409 is DTM's FAILURE)", s, b)
			}
		})
	}
}
