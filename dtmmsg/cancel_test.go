package dtmmsg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// TestCallerGoneInLocalIsSettledAtOnce: the caller goes away inside the local transaction, whose
// commit then fails with the cancellation (database/sql rolls it back): nothing committed. Publish
// asked the barrier whether it had committed with the caller's ended context, which could not ask,
// and left the record PROCESSING with "outcome unknown": the key was in flight, and the message
// prepared at DTM, until the back-check and a Reconciler came by. The question (which fences the
// local transaction) outlives the caller: the record is FAILED at once and the key free again.
func TestCallerGoneInLocalIsSettledAtOnce(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 20*time.Second)
	ctx, cancel := context.WithCancel(ctxb)
	defer cancel()
	out, err := e.w.PublishOrder(ctx, pub, e.svc, "gone-in-local", 3, cancel)
	if !errors.Is(err, dtmmsg.ErrLocalFailed) || out.Status != txstatus.Failed {
		t.Fatalf("Publish = %+v, %v; want the local transaction reported rolled back", out, err)
	}
	rec, gerr := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "gone-in-local")
	if gerr != nil {
		t.Fatal(gerr)
	}
	if rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %s, want FAILED: nothing committed, the key is free again", rec.Status)
	}
	if n := e.count(t, e.w.Tables.Orders, "idem_key = ?", "gone-in-local"); n != 0 {
		t.Fatalf("%d orders committed", n)
	}
	// A retry publishes.
	again, err := e.w.PublishOrder(ctxb, pub, e.svc, "gone-in-local", 3, nil)
	if err != nil || again.Status != txstatus.Succeed {
		t.Fatalf("retry = %+v, %v", again, err)
	}
}

// TestCallerGoneBackCheckIsBounded: the caller goes away inside a local transaction whose outcome the
// database has not decided yet (its barrier row held by a transaction still open on the server, as a
// commit whose reply was lost on a half-open connection leaves it). Publish's question to the barrier
// waits on that row's lock; since it outlives the caller it ran on a context nothing bounded, and
// Publish hung as long as the lock was held — InnoDB's lock wait timeout (50 s by default), PostgreSQL's (none by default) —
// with the caller long gone. It gives up within its bound and leaves the record to the Reconciler.
func TestCallerGoneBackCheckIsBounded(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	sqlDB, err := e.w.DB.DB()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxb)
	defer cancel()
	release := make(chan struct{})
	held := make(chan struct{})
	started := false
	defer func() {
		close(release)
		if started {
			<-held
		}
	}()
	insert := "INSERT IGNORE INTO " + e.w.Tables.Barrier + " (trans_type, gid, branch_id, op, barrier_id, reason) VALUES ('msg', ?, '00', 'msg', '01', 'msg')"
	begun := time.Time{}
	out, err := pub.Publish(ctx, dtmmsg.PublishParams{
		Call:  idemkit.Call{Scope: chaosdtmmsg.Scope, Key: "gone-in-doubt"},
		Steps: func(m *dtmcli.Msg) { m.Add(e.svc+"/inbox", chaosdtmmsg.Order{Key: "gone-in-doubt", Amount: 1}) },
		Local: func(_ context.Context, _ *gorm.DB, gid string) error {
			// Another transaction takes the barrier row as soon as the local one lets go of it, and
			// keeps it open: the local transaction's outcome, as the database sees it, is not decided.
			started = true
			go func() {
				defer close(held)
				tx, err := sqlDB.BeginTx(ctxb, nil)
				if err != nil {
					t.Error(err)
					return
				}
				defer func() { _ = tx.Rollback() }()
				if _, err := tx.Exec(insert, gid); err != nil {
					t.Error(err)
				}
				<-release
			}()
			for {
				var n int
				if err := sqlDB.QueryRow("SELECT COUNT(*) FROM information_schema.processlist WHERE info LIKE 'INSERT IGNORE INTO " + e.w.Tables.Barrier + "%' AND time_ms > 200").Scan(&n); err != nil {
					return err
				}
				if n > 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			cancel() // the client disconnects
			begun = time.Now()
			return context.Canceled
		},
	})
	if begun.IsZero() {
		t.Fatalf("Publish = %+v, %v before its local transaction", out, err)
	}
	if took := time.Since(begun); took > 15*time.Second {
		t.Fatalf("Publish returned %s after its caller left (%+v, %v): its back-check was bounded by nothing", took.Round(time.Second), out, err)
	}
	if err == nil {
		t.Fatalf("Publish = %+v, nil; want the outcome reported unknown", out)
	}
}
