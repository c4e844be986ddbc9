package saga_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestLongStepErrorOnSQLStore: DTM takes a step's FAILURE answer as the saga's rollback reason, which
// its SQL stores keep in a varchar(1024). A step refusing with a message of more than about 1000
// characters made that write fail: the saga rolled back a retry interval later with the reason "fail
// message lost", and Submit reported that instead of the step's message. The answer is cut to fit.
func TestLongStepErrorOnSQLStore(t *testing.T) {
	k := newBank(t, nil)
	srv := testsvc.DTMOnMySQL(t)
	mux := http.NewServeMux()
	mux.Handle("/act", saga.Action(nil, func(context.Context, *dtmhttp.Request) (barrier.Outcome, error) {
		return barrier.Proceed, idemkit.Permanent(errors.New("refused: " + strings.Repeat("x", 1100)))
	}))
	mux.Handle("/comp", saga.Compensate(nil, func(context.Context, *dtmhttp.Request) (barrier.Outcome, error) {
		return barrier.Proceed, nil
	}))
	svc := httptest.NewServer(mux)
	defer svc.Close()
	init := &saga.Initiator{Server: srv.URL(), Lifecycle: k.init.Lifecycle, Wait: 20 * time.Second,
		Status: &txstatus.Client{Server: srv.URL(), PollInterval: 50 * time.Millisecond}}
	out, err := init.Submit(ctxb, saga.SubmitParams{Call: newCall(), Steps: func(s *dtmcli.Saga) {
		s.RetryInterval = 1
		s.Add(svc.URL+"/act", svc.URL+"/comp", map[string]int{"a": 1})
	}})
	if err != nil || out.Status != txstatus.Failed || out.Reason == nil || !strings.Contains(out.Reason.Error(), "refused: xxxxxxxx") {
		t.Fatalf("Submit = %s, reason %.300v, %v; want failed with the step's message", out.Status, out.Reason, err)
	}
}
