package msgx_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/record"
)

// TestTxIgnoredDeadlockDoesNotAckWithoutTheEffect: on MySQL/MariaDB a deadlock rolls the victim's
// whole transaction back and leaves its connection outside any transaction, so a Tx-mode handler that
// ignores the deadlock's error had its later statements, and the message's record, commit one by one:
// the message was acknowledged as processed, its effect lost (found by a defect hunt). The business's
// session and the record's Store now refuse every statement after the deadlock, as PostgreSQL does in
// an aborted transaction: the delivery is Failed (the handler's failure, record.ErrTxAborted) and
// the redelivery runs it again.
func TestTxIgnoredDeadlockDoesNotAckWithoutTheEffect(t *testing.T) {
	for _, multi := range []bool{false, true} {
		t.Run(fmt.Sprintf("multi=%v", multi), func(t *testing.T) {
			db := testsvc.MySQL(t, nil)
			if multi {
				db = testsvc.MySQLMulti(t, nil)
			}
			f := newTx(t, db, nil, nil)
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
				var err error
				if deadlocked, err = f.deadlock(ctx, tx, rows); err != nil { // deadlocked ignored: the handler's bug
					return err
				}
				_ = tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 20).Error // would commit on its own
				return nil
			})
			d := h(ctx, msg("dl1"))
			t.Logf("deadlock: %v; decision %v", deadlocked, d)
			if deadlocked == nil {
				t.Fatal("no deadlock: the handler was not the victim")
			}
			n, s := f.effectsOf(t, "dl1"), f.status(t, "dl1")
			if d.Action == msgx.Ack && n != 1 {
				t.Fatalf("decision %v with %d effects and record %q: the message was acknowledged without its effect", d, n, s)
			}
			if d.Action != msgx.Ack && (n != 0 || s != "") {
				t.Fatalf("decision %v with %d effects and record %q: want neither", d, n, s)
			}
			if !errors.Is(d.Err, record.ErrTxAborted) {
				t.Fatalf("decision %v: its error does not match record.ErrTxAborted", d)
			}
			// The redelivery runs the handler again, once, in a new transaction.
			redelivered := msg("dl1")
			redelivered.Attempt = 2
			want(t, f.handler(nil)(ctx, redelivered), msgx.Ack, msgx.Processed)
			if n := f.effectsOf(t, "dl1"); n != 1 {
				t.Fatalf("%d effects after the redelivery, want 1", n)
			}
		})
	}
}

// deadlock makes tx, which has updated row 1 of rows, a deadlock's victim (see testsvc.Deadlock),
// the other transaction made heavier with rows of the effects table.
func (f *txFixture) deadlock(ctx context.Context, tx *gorm.DB, rows string) (victim, err error) {
	sqlDB, err := f.db.DB()
	if err != nil {
		return nil, err
	}
	return testsvc.Deadlock(ctx, sqlDB, tx, rows, func(ctx context.Context, other *sql.Tx) error {
		for i := range 20 {
			if _, err := other.ExecContext(ctx, "INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", "other", i); err != nil {
				return err
			}
		}
		return nil
	})
}
