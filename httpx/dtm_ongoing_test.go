package httpx

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
)

// TestDTMOngoingBodyReleasesTheClaim: DTM reads a branch's answer as "ongoing, ask again later" when
// its status is 425 or its body contains ONGOING, whatever the status (dtmcli.HTTPResp2DtmError):
// 200 {"dtm_result":"ONGOING"} is DTM's documented way to say it. With Options.DTM such an answer
// was stored like any 2xx, and every retry DTM made got it replayed: the branch never ran again and
// the global transaction stayed unfinished for good (found by a defect hunt). On a DTM route an
// answer whose body says ONGOING is not stored now, as 425 is not: the retry runs the handler. Real
// TCP, MariaDB and Redis.
func TestDTMOngoingBodyReleasesTheClaim(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"200 ONGOING", http.StatusOK, `{"dtm_result":"ONGOING"}`},
		{"409 with ONGOING", http.StatusConflict, `{"dtm_result":"ONGOING","message":"stock reserved elsewhere"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bd := setup(t, realBackend, &Options{DTM: true}, nil)
			var calls atomic.Int64
			h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if calls.Add(1) == 1 {
					w.WriteHeader(tc.status)
					_, _ = io.WriteString(w, tc.body)
					return
				}
				_, _ = io.WriteString(w, `{"dtm_result":"SUCCESS"}`)
			}))
			srv, client := newServer(t, h)
			if status, _, body := send(t, client, http.MethodPost, srv.URL+"/branch", "k", `{}`); status != tc.status || body != tc.body {
				t.Fatalf("first call: %d %s, want %d %s", status, body, tc.status, tc.body)
			}
			status, hdr, body := send(t, client, http.MethodPost, srv.URL+"/branch", "k", `{}`)
			if status != http.StatusOK || body != `{"dtm_result":"SUCCESS"}` || hdr.Get(ReplayedHeader) != "" {
				t.Fatalf("retry after ONGOING: %d %s (replayed %q), want the handler to run again: 200 SUCCESS", status, body, hdr.Get(ReplayedHeader))
			}
			status, hdr, body = send(t, client, http.MethodPost, srv.URL+"/branch", "k", `{}`)
			if status != http.StatusOK || body != `{"dtm_result":"SUCCESS"}` || hdr.Get(ReplayedHeader) != "true" {
				t.Fatalf("duplicate of the success: %d %s (replayed %q), want its replay", status, body, hdr.Get(ReplayedHeader))
			}
			if n := calls.Load(); n != 2 {
				t.Fatalf("handler ran %d times, want 2", n)
			}
		})
	}
	// Without Options.DTM a body is a body: stored and replayed.
	bd := setup(t, realBackend, nil, nil)
	h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bd.calls.Add(1)
		_, _ = io.WriteString(w, `{"state":"ONGOING"}`)
	}))
	srv, client := newServer(t, h)
	send(t, client, http.MethodPost, srv.URL+"/x", "k", `{}`)
	if _, hdr, body := send(t, client, http.MethodPost, srv.URL+"/x", "k", `{}`); hdr.Get(ReplayedHeader) != "true" || body != `{"state":"ONGOING"}` || bd.calls.Load() != 1 {
		t.Fatalf("plain route: %s (replayed %q, %d runs), want the replay", body, hdr.Get(ReplayedHeader), bd.calls.Load())
	}
}
