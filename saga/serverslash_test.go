package saga_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestInitiatorServerWithTrailingSlash: an Initiator.Server given with a trailing slash
// ("http://dtm:36789/api/dtmsvr/") works as without one, as txstatus's does.
func TestInitiatorServerWithTrailingSlash(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	mux := http.NewServeMux()
	ok := func(context.Context, *dtmhttp.Request) (barrier.Outcome, error) { return barrier.Proceed, nil }
	mux.Handle("/act", saga.Action(nil, ok))
	mux.Handle("/comp", saga.Compensate(nil, ok))
	svc := httptest.NewServer(mux)
	defer svc.Close()
	init := &saga.Initiator{Server: k.srv.URL() + "/", Lifecycle: k.init.Lifecycle, Wait: settleTimeout}
	c := newCall()
	out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, Result: []byte("ok"), Steps: func(s *dtmcli.Saga) {
		s.Add(svc.URL+"/act", svc.URL+"/comp", map[string]string{"k": "v"})
	}})
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("Submit with Server %q = %s, %v", init.Server, out.Status, err)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("record %s", rec.Status)
	}
}
