package tcc_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/txstatus"
)

// TestPanickingTriesAbortIsPostedAgain: a panic in Tries aborts the transaction, but its abort was
// posted once, not through the abort a failed try's goes through (posted again while DTM does not
// answer, for up to 5 s: see TestLostAbortKeepsTheRefusal). Lost on its way (a gateway answering 503
// for a moment), it left the TCC prepared, its tried branches holding their reservations, until DTM
// timed it out at its TimeoutToFail with a reason of its own. The abort is now posted again as a
// failed try's is: DTM aborts the TCC with "panic in the tries" as soon as it is reachable, and the
// panic still goes on with its value.
func TestPanickingTriesAbortIsPostedAgain(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	var mu sync.Mutex
	var first time.Time
	const outage = time.Second
	p := dtmserver.NewProxy(t, k.srv, func(r *http.Request) dtmserver.ProxyAction {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/abort") {
			return dtmserver.ProxyAction{}
		}
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() {
			first = time.Now()
		}
		if time.Since(first) < outage {
			return dtmserver.ProxyAction{Drop: true, Status: 503}
		}
		return dtmserver.ProxyAction{}
	})
	g := *k.global
	g.Server, g.Status = p.URL(), &txstatus.Client{Server: p.URL(), PollInterval: 50 * time.Millisecond}
	g.Wait = 0 // the TCC is followed here, not by Run

	call := newCall()
	params := k.runParams(call)
	// Long enough that DTM's own timeout cannot be what ends the TCC within this test's waits.
	params.Options = func(tc *dtmcli.Tcc) { tc.TimeoutToFail = 60 }
	tries := params.Tries
	params.Tries = func(tc *dtmcli.Tcc) error {
		if err := tries(tc); err != nil {
			return err
		}
		panic("boom in the tries")
	}
	func() {
		defer func() {
			if v := recover(); v != "boom in the tries" {
				t.Fatalf("Run's panic: %v, want the tries' value", v)
			}
		}()
		out, err := g.Run(ctxb, params)
		t.Fatalf("Run returned %+v, %v; want the panic to go on", out, err)
	}()
	gid := k.record(t, call).GID
	if gid == "" {
		t.Fatal("no gid on the record")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		tr, err := k.srv.Query(ctxb, gid)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Status == dtmcli.StatusFailed {
			if tr.RollbackReason != "panic in the tries" {
				t.Fatalf("TCC failed with reason %q, want the abort's", tr.RollbackReason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TCC still %q (reason %q) 20 s after the panic: the abort was not posted again", tr.Status, tr.RollbackReason)
		}
		time.Sleep(50 * time.Millisecond)
	}
	k.checkBalances(t, 0)
	if rec := k.record(t, call); rec.Status != idemkit.StatusFailed && rec.Status != idemkit.StatusProcessing {
		t.Fatalf("record after the aborted TCC: %s", rec.Status)
	}
}
