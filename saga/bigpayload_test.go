package saga_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestLargePayloadsOutcomeIsReadable: DTM's query answer carries every branch operation with its
// payload, in base64. A saga of two steps with payloads under dtmhttp's default MaxBody answered more
// than the 4 MiB txstatus read: the answer was cut, every query failed ("malformed query answer:
// unexpected end of JSON input"), and neither Submit nor the Reconciler could ever settle the record,
// which kept the key in flight for good.
func TestLargePayloadsOutcomeIsReadable(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	svc := proceedService(t)
	init := &saga.Initiator{Server: k.srv.URL(), Lifecycle: k.init.Lifecycle, Wait: settleTimeout,
		Status: &txstatus.Client{Server: k.srv.URL(), PollInterval: 50 * time.Millisecond}}
	payload := map[string]string{"blob": strings.Repeat("x", 800<<10)} // under dtmhttp.DefaultMaxBody
	c := newCall()
	out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, Result: []byte("ok"), Steps: func(s *dtmcli.Saga) {
		s.Add(svc.URL+"/act", svc.URL+"/comp", payload).Add(svc.URL+"/act", svc.URL+"/comp", payload)
	}})
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("Submit = %s, %.300v", out.Status, err)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("record %s", rec.Status)
	}
	info, err := init.Status.Query(ctxb, out.GID)
	if err != nil || info.TransType != "saga" || info.Branches != 4 {
		t.Fatalf("Query = %+v, %.300v; want a saga with 4 branch operations", info, err)
	}
}

// proceedService serves a saga step at /act and its compensation at /comp, both of which proceed.
func proceedService(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	ok := func(context.Context, *dtmhttp.Request) (barrier.Outcome, error) { return barrier.Proceed, nil }
	mux.Handle("/act", saga.Action(nil, ok))
	mux.Handle("/comp", saga.Compensate(nil, ok))
	svc := httptest.NewServer(mux)
	t.Cleanup(svc.Close)
	return svc
}
