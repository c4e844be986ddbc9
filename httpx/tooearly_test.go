package httpx

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
)

// TestTooEarlyReleasesTheClaim: a handler answering 425 Too Early (RFC 8470: retry later; on a DTM
// branch route, {"dtm_result":"ONGOING"}, which DTM asks again) must leave the key free, as 408 and
// 429 do: storing it replayed "ongoing" to every retry, and the branch never completed. Real TCP,
// MariaDB and Redis.
func TestTooEarlyReleasesTheClaim(t *testing.T) {
	for _, dtm := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "DTM"}[dtm], func(t *testing.T) {
			bd := setup(t, realBackend, &Options{DTM: dtm}, nil)
			var calls atomic.Int64
			h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if calls.Add(1) == 1 {
					w.WriteHeader(http.StatusTooEarly)
					_, _ = io.WriteString(w, `{"dtm_result":"ONGOING"}`)
					return
				}
				_, _ = io.WriteString(w, `{"dtm_result":"SUCCESS"}`)
			}))
			srv, client := newServer(t, h)
			if status, _, body := send(t, client, http.MethodPost, srv.URL+"/branch", "k", `{}`); status != http.StatusTooEarly {
				t.Fatalf("first call: %d %s, want 425", status, body)
			}
			status, hdr, body := send(t, client, http.MethodPost, srv.URL+"/branch", "k", `{}`)
			if status != http.StatusOK || body != `{"dtm_result":"SUCCESS"}` || hdr.Get(ReplayedHeader) != "" {
				t.Fatalf("retry after 425: %d %s (replayed %q), want the handler to run again: 200 SUCCESS", status, body, hdr.Get(ReplayedHeader))
			}
			if n := calls.Load(); n != 2 {
				t.Fatalf("handler ran %d times, want 2", n)
			}
			status, hdr, body = send(t, client, http.MethodPost, srv.URL+"/branch", "k", `{}`)
			if status != http.StatusOK || body != `{"dtm_result":"SUCCESS"}` || hdr.Get(ReplayedHeader) != "true" {
				t.Fatalf("duplicate of the success: %d %s (replayed %q), want its replay", status, body, hdr.Get(ReplayedHeader))
			}
		})
	}
}
