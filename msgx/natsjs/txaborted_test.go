package natsjs_test

import (
	"context"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// TestTxIgnoredFailedStatementIsDeadLettered: end to end on JetStream and PostgreSQL, a Tx-mode
// handler that ignores a failed statement's error (its transaction aborted, the record cannot follow)
// is retried and dead-lettered GaveUp at msgx.Options.MaxAttempts, on a consumer without MaxDeliver,
// instead of being redelivered forever; nothing of it commits.
func TestTxIgnoredFailedStatementIsDeadLettered(t *testing.T) {
	f := setup(t, nil)
	db := testsvc.Postgres(t, nil)
	records, effects := testbroker.TxTables(t, db)
	var err error
	if f.guard, err = idemkit.New(records, nil); err != nil {
		t.Fatal(err)
	}
	if f.mg, err = msgx.New(f.guard, &msgx.Options{MaxAttempts: 3, RetryDelay: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	h := f.mg.Tx(db, records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
		if err := tx.Exec("INSERT INTO "+effects+" (msg_id) VALUES (?)", m.ID).Error; err != nil {
			return err
		}
		_ = tx.Exec("SELECT 1/0").Error // ignored: the handler's bug
		return nil
	})
	f.publish(t, "ab1", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- natsjs.Consume(ctx, f.js, f.cons, h, &natsjs.Options{DeadLetterSubject: f.dlq,
			Observe: func(m *msgx.Message, d msgx.Decision) { f.decided <- decided{m, d} }})
	}()
	var got []msgx.Outcome
	for len(got) == 0 || got[len(got)-1] == msgx.Failed {
		select {
		case d := <-f.decided:
			got = append(got, d.d.Outcome)
		case <-time.After(10 * time.Second):
			t.Fatalf("decisions so far %v: the message is still being redelivered", got)
		}
		if len(got) > 5 {
			t.Fatalf("decisions %v: redelivered past MaxAttempts", got)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[2] != msgx.GaveUp {
		t.Fatalf("decisions %v, want failed, failed, gave-up", got)
	}
	dead := f.dead(t)
	if len(dead) != 1 || dead[0].Header.Get(natsjs.HeaderOutcome) != "gave-up" {
		t.Fatalf("%d dead letters (%v), want one gave-up", len(dead), dead)
	}
	var n int
	if err := db.Raw("SELECT count(*) FROM " + effects).Row().Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d effects (%v), want none", n, err)
	}
	f.drained(t)
}
