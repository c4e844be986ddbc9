package saga_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/txstatus"
)

// TestReconcilerStopsAskingAManagerThatDoesNotAnswer: DTM hangs (its store stuck: it accepts
// connections and answers nothing) while records wait for the Reconciler. A pass asked DTM about every
// record it listed, each query waiting for the client's timeout (5 s by default): with the sweeper's
// default batch of 500, four pages of them, close to three hours for one pass — during which the
// sweeper ran none of its other tasks, and the records it had asked about during the outage waited for
// the next pass, hours later, however soon DTM came back. Once the manager has failed to answer a few
// records in a row the pass stops, and the next goes on after them.
func TestReconcilerStopsAskingAManagerThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	var asked atomic.Int32
	var hung atomic.Bool
	hung.Store(true)
	hold := make(chan struct{}) // never closed: a hung request waits until the proxy closes
	p := dtmserver.NewProxy(t, k.srv, func(r *http.Request) dtmserver.ProxyAction {
		if hung.Load() {
			asked.Add(1)
			return dtmserver.ProxyAction{Hold: hold}
		}
		return dtmserver.ProxyAction{}
	})
	const records = 8
	var calls []idemkit.Call
	for range records {
		c := newCall()
		tx, _, err := k.lc.Begin(ctxb, "saga", txstatus.NewGID(), c) // the initiator dies before its submit
		if err != nil {
			t.Fatal(err)
		}
		k.lc.Detach(ctxb, tx)
		calls = append(calls, c)
	}
	rc := &hooks.Reconciler{Lifecycle: k.lc, Scopes: []string{"POST /transfers"}, TransType: "saga",
		Manager: &txstatus.Client{Server: p.URL(), HTTP: &http.Client{Timeout: 200 * time.Millisecond}}}
	later := time.Now().Add(time.Hour) // past every lease
	n, err := rc.RunOnce(ctxb, later, 500)
	if n != 0 || err == nil {
		t.Fatalf("pass while DTM hangs = %d, %v; want nothing settled and an error", n, err)
	}
	if got := asked.Load(); got > 3 {
		t.Fatalf("the pass asked a manager that did not answer about %d of %d records (each waiting for the client's timeout); want it to stop after 3", got, records)
	}
	// DTM answers again: the next passes settle every record (fenced, never started: FAILED).
	hung.Store(false)
	for pass := 0; pass < 3; pass++ {
		if _, err := rc.RunOnce(ctxb, later, 500); err != nil {
			t.Fatalf("pass once DTM answers: %v", err)
		}
	}
	for _, c := range calls {
		if rec := k.record(t, c); rec.Status != idemkit.StatusFailed {
			t.Fatalf("record %s after DTM came back: %s, want FAILED", c.Key, rec.Status)
		}
	}
}
