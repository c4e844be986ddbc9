package httpx

import (
	"net/http"
	"strings"
	"testing"
)

// TestDTMRejectKeepsAFailureBody: DTM reads a branch's answer as FAILURE when its status is 409 or its
// body contains FAILURE, whatever the status — 200 {"dtm_result":"FAILURE"} is how dtmcli's
// Result2HttpJSON answers a handler returning dtmcli.MapFailure. With Options.DTM and Duplicates
// Reject only the status of an answer is stored, and the duplicate of a 2xx got 200
// {"dtm_result":"SUCCESS"}: a saga action whose FAILURE answer DTM never received (a lost reply, a
// timeout) was then taken for a success, and the saga went on instead of rolling back (found by a
// defect hunt). Such an answer is recorded as the failure DTM reads in it: its duplicates get 409.
func TestDTMRejectKeepsAFailureBody(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			bd := setup(t, b, &Options{DTM: true, Duplicates: Reject}, nil)
			calls := 0
			h := bd.mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls++
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"dtm_result":"FAILURE"}`))
			}))
			first := serve(h, req("POST", "/branch", "gid-1-01-action", `{"amount":30}`))
			if first.Code != http.StatusOK || first.Body.String() != `{"dtm_result":"FAILURE"}` {
				t.Fatalf("first: %d %s", first.Code, first.Body)
			}
			again := serve(h, req("POST", "/branch", "gid-1-01-action", `{"amount":30}`))
			failure := again.Code == http.StatusConflict || strings.Contains(again.Body.String(), "FAILURE")
			if !failure || strings.Contains(again.Body.String(), "SUCCESS") || calls != 1 {
				t.Fatalf("redelivery of a branch that answered FAILURE: %d %s (%d calls); want a failure DTM reads as such (409), not run again",
					again.Code, again.Body, calls)
			}
		})
	}
}
