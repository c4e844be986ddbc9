package dtmmsg_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// TestReconcilerStopsAskingADTMThatDoesNotAnswer: DTM does not answer (down, or hung on its store)
// while message records wait for the Reconciler. A pass asked it about every record it listed, each
// question waiting for the client's timeout (5 s by default): with the sweeper's default batch of 500,
// four pages of them, hours for one pass, during which the sweeper ran none of its other tasks. Once
// DTM has failed to answer about 3 records in a row the pass stops, and the next goes on after them,
// as hooks.Reconciler does (found by a defect hunt of the hooks' reconciler).
func TestReconcilerStopsAskingADTMThatDoesNotAnswer(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	const records = 8
	var keys []string
	for i := range records {
		key := fmt.Sprintf("hung%d", i)
		e.delivered(t, pub, key, 2)
		keys = append(keys, key)
	}
	var asked atomic.Int32
	var hung atomic.Bool
	hung.Store(true)
	dtm := &txstatus.Client{Server: e.dtm.URL()}
	r := &dtmmsg.Reconciler{Lifecycle: &hooks.Lifecycle{Guard: e.w.Guard}, Barrier: e.w.Barrier,
		Status: func(ctx context.Context, gid string) (txstatus.Status, error) {
			if hung.Load() {
				asked.Add(1)
				return txstatus.Unknown, errors.New("DTM did not answer (the client's timeout)")
			}
			return dtm.Status(ctx, gid)
		},
		Pending: func(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error) {
			return e.w.Guard.Pending(ctx, now.Add(time.Hour), limit, chaosdtmmsg.Scope)
		}}
	n, err := r.RunOnce(ctxb, time.Now(), 500)
	if n != 0 || err == nil {
		t.Fatalf("pass while DTM does not answer = %d, %v; want nothing settled and an error", n, err)
	}
	if got := asked.Load(); got > 3 {
		t.Fatalf("the pass asked a DTM that did not answer about %d of %d records (each waiting for the client's timeout); want it to stop after 3", got, records)
	}
	// DTM answers again: the next passes settle every record (delivered: SUCCEEDED).
	hung.Store(false)
	for range 3 {
		if _, err := r.RunOnce(ctxb, time.Now(), 500); err != nil {
			t.Fatalf("pass once DTM answers: %v", err)
		}
	}
	for _, key := range keys {
		if rec, err := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, key); err != nil || rec.Status != idemkit.StatusSucceeded {
			t.Fatalf("record %s after DTM came back: %+v, %v; want SUCCEEDED", key, rec, err)
		}
	}
}
