package tcc_test

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/txstatus"
)

// TestWaitResultOptionDoesNotRepeatTheAbort: Options may set dtmcli's t.WaitResult. DTM then processes
// the TCC's cancels within the abort (it reads wait_result from the options stored at the prepare),
// and answers the abort 500 while a cancel fails. abort took that for an abort DTM did not answer and
// posted it again and again for 5 s: each made DTM run the cancels once more and double the TCC's
// retry interval, so a cancel failing for a moment held the rollback (the try's reservation, the
// key in flight) for minutes after it was fixed, and the start reported its abort unacknowledged.
// Global ignores t.WaitResult, as saga.Initiator does (Global.Wait waits): the abort is posted once.
func TestWaitResultOptionDoesNotRepeatTheAbort(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	s := newRawSvc(t)
	s.failCancel.Store(true)
	var aborts atomic.Int32
	p := dtmserver.NewProxy(t, k.srv, func(r *http.Request) dtmserver.ProxyAction {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/abort") {
			aborts.Add(1)
		}
		return dtmserver.ProxyAction{}
	})
	g := *k.global
	g.Server = p.URL()
	g.Status = &txstatus.Client{Server: p.URL(), PollInterval: 50 * time.Millisecond}
	g.Wait = time.Second
	c := newCall()
	params := s.params(c, errors.New("try says no"))
	params.Options = func(t *dtmcli.Tcc) { t.RetryInterval = 1; t.WaitResult = true }
	out, err := g.Run(ctxb, params)
	if err != nil || out.Status.Final() && out.Status != txstatus.Failed || out.Status == txstatus.Submitted ||
		out.Reason == nil || !strings.Contains(out.Reason.Error(), "try says no") {
		t.Fatalf("Run = %+v, %v; want the TCC aborted for the try's error", out, err)
	}
	if n := aborts.Load(); n != 1 {
		t.Fatalf("the abort was posted %d times, DTM answering it each time (and running the cancels again); want once", n)
	}
	s.failCancel.Store(false)
	if tr := waitTrans(t, k.srv, out.GID); tr.Status != dtmcli.StatusFailed {
		t.Fatalf("TCC %s", tr.Status)
	}
}
