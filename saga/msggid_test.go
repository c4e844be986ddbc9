package saga_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestSubmitRefusesAMessageGID: a gid starting with "msg-" (dtmmsg.GIDPrefix) marks a 2-phase
// message's record. hooks.Reconciler passes such records over and leaves them to dtmmsg.Reconciler
// (both may run over the same Scopes), which would take the saga for a message whose local
// transaction never committed and roll its record back while the saga succeeds — or, with no
// dtmmsg.Reconciler, nobody would ever settle it. Submit refuses such a gid before anything starts.
func TestSubmitRefusesAMessageGID(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	init := *k.init
	init.Wait = 0 // the record is left to the reconciler
	c := newCall()
	gid := "msg-" + txstatus.NewGID()
	out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, GID: gid, Steps: k.addSteps, Result: []byte("ok")})
	if err == nil || out.Status != "" {
		// What became of it: the saga runs, and its record is never settled by hooks.Reconciler.
		waitTrans(t, k.srv, gid)
		rc := &hooks.Reconciler{Lifecycle: k.lc, Scopes: []string{c.Scope}, Manager: init.Status, TransType: "saga"}
		_, rerr := rc.RunOnce(ctxb, time.Now().Add(time.Hour), 10)
		t.Fatalf("Submit(GID %q) = %+v, %v; want an error and nothing started (after the reconciler, %v: the record is %s)",
			gid, out, err, rerr, k.record(t, c).Status)
	}
	if _, gerr := k.guard.Get(ctxb, c.Scope, c.Key); !errors.Is(gerr, idemkit.ErrNotFound) {
		t.Fatalf("Submit(GID %q) left a record: %v", gid, gerr)
	}
	if tr, qerr := k.srv.Query(ctxb, gid); qerr != nil || tr.Status != "" {
		t.Fatalf("DTM holds %q: %+v, %v", gid, tr, qerr)
	}
}
