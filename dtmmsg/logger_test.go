package dtmmsg_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestReconcilerLogsEveryRecordItCannotSettle: Reconciler.Logger is to receive a line per record that
// could not be settled. Only a failed Conclude (a hook's or the store's error) was logged: a record
// the Reconciler leaves PROCESSING for an operator — a committed message DTM has no record of, or
// reports failed, or an old claim it no longer back-checks — and one whose DTM question or back-check
// failed, or whose hook panicked, reached RunOnce's error and nothing else, so an operator reading the
// log (the sweeper's own Logger unset) never learnt of the keys stuck in flight.
func TestReconcilerLogsEveryRecordItCannotSettle(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	e.delivered(t, pub, "log1", 3)
	rec, err := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "log1")
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	r := &dtmmsg.Reconciler{Lifecycle: &hooks.Lifecycle{Guard: e.w.Guard}, Barrier: e.w.Barrier,
		Status: func(context.Context, string) (txstatus.Status, error) { return txstatus.Unknown, nil }, // DTM forgot it
		Pending: func(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error) {
			return e.w.Guard.Pending(ctx, now.Add(time.Hour), limit, chaosdtmmsg.Scope)
		},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	if n, err := r.RunOnce(ctxb, time.Now(), 10); n != 0 || err == nil {
		t.Fatalf("RunOnce = %d, %v; want an error naming the message DTM has no record of", n, err)
	}
	if got := logs.String(); !strings.Contains(got, rec.GID) || !strings.Contains(got, "no record") {
		t.Fatalf("Logger got %q; want a line naming %s, which the Reconciler could not settle (DTM has no record of it)", got, rec.GID)
	}
}

// TestReconcilerWithoutAGuardSettlesNothing: a Reconciler given its records through Pending and a
// Lifecycle without a Guard ran the Commit hook of a delivered message's record and reported it
// settled, while the record stayed PROCESSING (without a Guard, Conclude writes nothing): pass after
// pass the hook ran again and the key stayed in flight. Such a Reconciler is refused.
func TestReconcilerWithoutAGuardSettlesNothing(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	status := e.delivered(t, pub, "ng1", 3)
	commits := 0
	r := &dtmmsg.Reconciler{
		Lifecycle: &hooks.Lifecycle{OnCommit: hooks.CommitFunc(func(context.Context, *hooks.Txn, []byte) error { commits++; return nil })},
		Barrier:   e.w.Barrier, Status: status.Status,
		Pending: func(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error) {
			return e.w.Guard.Pending(ctx, now.Add(time.Hour), limit, chaosdtmmsg.Scope)
		}}
	n, err := r.RunOnce(ctxb, time.Now(), 10)
	rec, gerr := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "ng1")
	if gerr != nil {
		t.Fatal(gerr)
	}
	if n != 0 || err == nil || commits != 0 || rec.Status != idemkit.StatusProcessing {
		t.Fatalf("RunOnce with a Lifecycle without a Guard = %d, %v (record %s, Commit hook run %d times); want it refused, nothing run nor reported settled",
			n, err, rec.Status, commits)
	}
}

// TestReconcilerReportsAStatusItDoesNotKnow: a Status function (the Reconciler's field is the user's to
// set) reporting a status outside DTM's — "ABORTED", a translation's mistake — had its record taken
// for a message still on its way: passed over, pass after pass, with no error, the key in flight for
// ever and nothing telling an operator. Such a record is reported and left PROCESSING.
func TestReconcilerReportsAStatusItDoesNotKnow(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	e.delivered(t, pub, "odd1", 3)
	r := &dtmmsg.Reconciler{Lifecycle: &hooks.Lifecycle{Guard: e.w.Guard}, Barrier: e.w.Barrier,
		Status: func(context.Context, string) (txstatus.Status, error) { return "ABORTED", nil },
		Pending: func(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error) {
			return e.w.Guard.Pending(ctx, now.Add(time.Hour), limit, chaosdtmmsg.Scope)
		}}
	n, err := r.RunOnce(ctxb, time.Now(), 10)
	rec, gerr := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "odd1")
	if gerr != nil {
		t.Fatal(gerr)
	}
	if n != 0 || err == nil || !strings.Contains(err.Error(), "ABORTED") || rec.Status != idemkit.StatusProcessing {
		t.Fatalf("RunOnce = %d, %v (record %s); want the record whose status the reconciler does not know reported and left PROCESSING", n, err, rec.Status)
	}
}
