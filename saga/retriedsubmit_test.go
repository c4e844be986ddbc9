package saga_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// resubmitting is a transport that retries a submit whose answer it did not get, as a retrying
// HTTP client or a gateway in front of DTM does: it sends the submit, drops DTM's answer (a timeout,
// say), and sends the same request again once the saga the first one started has finished.
type resubmitting struct {
	t     *testing.T
	query func(gid string) string // the saga's status at DTM
}

func (r *resubmitting) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(req.URL.Path, "/submit") {
		return http.DefaultTransport.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	send := func() (*http.Response, error) {
		again := req.Clone(req.Context())
		again.Body = io.NopCloser(bytes.NewReader(body))
		return http.DefaultTransport.RoundTrip(again)
	}
	resp, err := send()
	if err != nil {
		return nil, err
	}
	_ = resp.Body.Close() // the answer is lost
	gid := gidOf(body)
	deadline := time.Now().Add(settleTimeout)
	for st := r.query(gid); st != dtmcli.StatusSucceed && st != dtmcli.StatusFailed; st = r.query(gid) {
		if time.Now().After(deadline) {
			r.t.Errorf("the saga %s did not finish: %s", gid, st)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return send()
}

// gidOf reads the gid of a submit's body.
func gidOf(body []byte) string {
	_, after, _ := strings.Cut(string(body), `"gid":"`)
	gid, _, _ := strings.Cut(after, `"`)
	return gid
}

// TestRetriedSubmitOfAFinishedSagaIsFollowed: the initiator's submit reaches DTM, which starts the
// saga, but its answer is lost, and the HTTP client (or a gateway in front of DTM) sends the submit
// again once the saga has finished. DTM refuses that second submit (409: the gid is held as succeed),
// and Submit took the refusal for DTM's refusal to start the saga: the record was rolled back FAILED,
// "never started", while the saga had run — and the client's retry with the same key ran a second
// saga, moving the money twice. A refused submit whose gid DTM holds as a saga with this call's steps
// and payloads is this call's own submit that landed: Submit follows it. With a fresh gid and with one
// chosen up front (as the README's initiator chooses it).
func TestRetriedSubmitOfAFinishedSagaIsFollowed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		gid  func() string
	}{{"FreshGID", func() string { return "" }}, {"ChosenGID", txstatus.NewGID}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := newBank(t, nil)
			query := func(gid string) string {
				tr, err := k.srv.Query(ctxb, gid)
				if err != nil {
					t.Error(err)
					return ""
				}
				return tr.Status
			}
			init := *k.init
			init.Status = &txstatus.Client{Server: k.srv.URL(), PollInterval: 50 * time.Millisecond,
				HTTP: &http.Client{Transport: &resubmitting{t: t, query: query}}}
			c := newCall()
			gid := tc.gid()
			out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, GID: gid, Steps: k.addSteps, Result: []byte("ok")})
			if err != nil || out.Status != txstatus.Succeed || string(out.Result) != "ok" {
				t.Fatalf("Submit = %s (%v) result %q, %v: the saga succeeded", out.Status, out.Reason, out.Result, err)
			}
			k.checkBalances(t, amount)
			if rec := k.record(t, c); rec.Status != idemkit.StatusSucceeded || rec.GID != out.GID {
				t.Fatalf("record %s gid %q, want SUCCEEDED %q", rec.Status, rec.GID, out.GID)
			}
			if st := k.orderStatus(t, out.GID); st != "PAID" {
				t.Fatalf("order %s", st)
			}
			// The client's retry replays the success: no second saga.
			again, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, GID: tc.gid(), Steps: k.addSteps, Result: []byte("ok")})
			if err != nil || !again.Replayed {
				t.Fatalf("retry = %+v, %v", again, err)
			}
			k.checkBalances(t, amount)
		})
	}
}
