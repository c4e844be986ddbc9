package msgx_test

import (
	"context"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/record"
)

// TestTxDeadlockVictimIsNotCountedAgainstMaxAttempts: a Tx-mode handler picked as a deadlock victim
// (MariaDB error 1213, returned as the handler's error) on an attempt at MaxAttempts was dead-lettered
// GaveUp, although the README promises such a delivery is retried (Failed) and a write conflict at
// COMMIT is not counted: a contention the database resolved is no failure of the message (found by a
// defect hunt). It is now retried, and the redelivery takes effect once.
func TestTxDeadlockVictimIsNotCountedAgainstMaxAttempts(t *testing.T) {
	testTxDeadlockVictimIsRetried(t, nil, &msgx.Options{MaxAttempts: 2})
}

// TestTxDeadlockVictimClassifiedPermanentIsRetried: under an idemkit.Options.IsPermanent that calls
// unknown errors permanent, a Tx-mode handler picked as a deadlock victim had Guard.Tx store REJECTED
// with "Deadlock found": the message was dead-lettered Rejected and every redelivery got the stored
// rejection, the handler never run again (found by a defect hunt) — as DoTx did before
// TestDoTxPermanentDeadlockLeavesNoRecord. A write conflict the database ended the transaction on is
// no business failure, whatever the classifier says: nothing is recorded, the delivery is retried.
func TestTxDeadlockVictimClassifiedPermanentIsRetried(t *testing.T) {
	testTxDeadlockVictimIsRetried(t, &idemkit.Options{IsPermanent: func(error) bool { return true }}, nil)
}

func testTxDeadlockVictimIsRetried(t *testing.T, gopts *idemkit.Options, opts *msgx.Options) {
	db := testsvc.MySQL(t, nil)
	f := newTx(t, db, gopts, opts)
	rows := testsvc.RowsTable(t, f.db)
	ctx := context.Background()
	var deadlocked error
	h := f.mg.Tx(f.db, f.records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
		if err := tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 10).Error; err != nil {
			return err
		}
		if err := tx.Exec("UPDATE " + rows + " SET v = v + 1 WHERE id = 1").Error; err != nil {
			return err
		}
		if m.Attempt > 2 {
			return nil
		}
		var err error
		if deadlocked, err = f.deadlock(ctx, tx, rows); err != nil {
			return err
		}
		return deadlocked
	})
	m := msg("dla")
	m.Attempt = 2
	d := h(ctx, m)
	if deadlocked == nil || !record.IsConflict(deadlocked) {
		t.Fatalf("no deadlock (%v): the handler was not the victim", deadlocked)
	}
	t.Logf("deadlock: %v; decision %v", deadlocked, d)
	want(t, d, msgx.Retry, msgx.Failed)
	if n, s := f.effectsOf(t, "dla"), f.status(t, "dla"); n != 0 || s != "" {
		t.Fatalf("%d effects and record %q after the deadlock, want neither", n, s)
	}
	m = msg("dla")
	m.Attempt = 3
	want(t, h(ctx, m), msgx.Ack, msgx.Processed)
	if n := f.effectsOf(t, "dla"); n != 1 {
		t.Fatalf("%d effects after the redelivery, want 1", n)
	}
}
