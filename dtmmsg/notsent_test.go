package dtmmsg_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// TestPrepareNeverSentFreesTheKey: DTM is down at the prepare (the connection refused). The prepare
// went through dtmcli, whose error is resty's: it did not match txstatus.ErrNotSent as the start of a
// saga or a TCC that could not connect does, and the caller could not tell an outage from an answer
// lost. Nothing was sent, so DTM never heard of the message: Publish returns an error matching
// ErrNotSent, the record is FAILED (the key free again, nothing for a Reconciler), nothing committed,
// and a retry with the key, DTM back, publishes once (found by a defect hunt).
func TestPrepareNeverSentFreesTheKey(t *testing.T) {
	e := setup(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() + "/api/dtmsvr"
	_ = l.Close() // nothing listens there
	const key = "prepare-not-sent"
	out, err := e.w.PublishOrder(ctxb, e.w.Publisher(closed, e.svc, 0), e.svc, key, 4, nil)
	if !errors.Is(err, txstatus.ErrNotSent) || errors.Is(err, txstatus.ErrNoAnswer) || out.Status != txstatus.Failed {
		t.Fatalf("Publish with DTM down = %+v, %v; want Failed and an error matching txstatus.ErrNotSent", out, err)
	}
	rec, err := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, key)
	if err != nil || rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %+v, %v; want FAILED, the key free again", rec, err)
	}
	if n := e.count(t, e.w.Tables.Orders, "idem_key = ?", key); n != 0 {
		t.Fatalf("%d orders committed", n)
	}
	r := &dtmmsg.Reconciler{Lifecycle: &hooks.Lifecycle{Guard: e.w.Guard}, Barrier: e.w.Barrier,
		Status: (&txstatus.Client{Server: e.dtm.URL()}).Status,
		Pending: func(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error) {
			return e.w.Guard.Pending(ctx, now.Add(time.Hour), limit, chaosdtmmsg.Scope)
		}}
	if n, err := r.RunOnce(ctxb, time.Now(), 10); n != 0 || err != nil {
		t.Fatalf("Reconciler = %d, %v; want nothing to settle", n, err)
	}
	status := e.delivered(t, e.w.Publisher(e.dtm.URL(), e.svc, 0), key, 4)
	if st, err := status.Status(ctxb, out.GID); err != nil || st != txstatus.Unknown {
		t.Fatalf("DTM holds the first gid: %s, %v", st, err)
	}
	if n := e.count(t, e.w.Tables.Orders, "idem_key = ?", key); n != 1 {
		t.Fatalf("%d orders committed, want 1", n)
	}
	if n := e.count(t, e.w.Tables.Inbox, "idem_key = ?", key); n != 1 {
		t.Fatalf("%d messages delivered, want 1", n)
	}
}

// TestUnansweredPrepareIsBoundedByTheCaller: DTM accepts the prepare's connection and never answers.
// dtmcli's prepare takes no context (and its default client no timeout): Publish hung past the
// caller's deadline, for as long as the connection stayed open. The caller's ctx bounds the prepare;
// DTM may have recorded it, so the local transaction is fenced (a late back-check answers FAILURE) and
// the record is FAILED, the key free again: a retry publishes once (found by a defect hunt).
func TestUnansweredPrepareIsBoundedByTheCaller(t *testing.T) {
	e := setup(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() { // after the test: what it waits on ends
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	silent := "http://" + l.Addr().String() + "/api/dtmsvr"
	const key = "prepare-unanswered"
	type result struct {
		out hooks.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctxb, time.Second)
		defer cancel()
		out, err := e.w.PublishOrder(ctx, e.w.Publisher(silent, e.svc, 0), e.svc, key, 5, nil)
		done <- result{out, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Publish still waits for the prepare's answer 30 s after its caller's 1 s deadline")
	}
	if res.err == nil || errors.Is(res.err, txstatus.ErrNotSent) || res.out.Status != txstatus.Failed {
		t.Fatalf("Publish = %+v, %v; want Failed and an error that is not ErrNotSent (the prepare was sent)", res.out, res.err)
	}
	rec, err := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, key)
	if err != nil || rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %+v, %v; want FAILED, the key free again", rec, err)
	}
	if err := e.w.Barrier.QueryPrepared(ctxb, res.out.GID); !errors.Is(err, barrier.ErrMsgRolledBack) {
		t.Fatalf("back-check of the unanswered gid: %v; want it fenced (rolled back)", err)
	}
	e.delivered(t, e.w.Publisher(e.dtm.URL(), e.svc, 0), key, 5)
	if n := e.count(t, e.w.Tables.Orders, "idem_key = ?", key); n != 1 {
		t.Fatalf("%d orders committed, want 1", n)
	}
}
