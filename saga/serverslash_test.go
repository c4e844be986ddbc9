package saga_test

import (
	"testing"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestInitiatorServerWithTrailingSlash: an Initiator.Server given with a trailing slash
// ("http://dtm:36789/api/dtmsvr/") works as without one, as txstatus's does.
func TestInitiatorServerWithTrailingSlash(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	svc := proceedService(t)
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
