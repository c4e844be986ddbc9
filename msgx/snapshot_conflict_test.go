package msgx_test

import (
	"context"
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
)

// TestTxSnapshotIsolationConflict: MariaDB with innodb_snapshot_isolation (the default from 11.6 on)
// answers a REPEATABLE READ write to a row changed since the transaction's read view with error 1020
// ("Record has changed since last read"), and rolls the whole transaction back, leaving the
// connection outside any transaction — as a deadlock (1213) does, but only 1213 was known. A Tx-mode
// handler that ignored the error had its later statements and the message's record commit one by
// one: the message was acknowledged Processed, its effect before the conflict lost (found by a
// defect hunt). One that returned the error had it counted against MaxAttempts (GaveUp), where a
// write conflict the database resolved is retried and not counted. 1020 is now a write conflict that
// ended the transaction, as 1213 is: the first is Failed (record.ErrTxAborted, the handler's failure)
// and runs again, the second retried, not counted and never rejected, whatever the Guard's
// classifier says; the redelivery takes effect once.
func TestTxSnapshotIsolationConflict(t *testing.T) {
	for _, c := range []struct {
		name          string
		ignore, perms bool
	}{{"ignored", true, false}, {"returned", false, false}, {"returned-classified-permanent", false, true}} {
		name, ignore := c.name, c.ignore
		t.Run(name, func(t *testing.T) {
			db := testsvc.MySQLWith(t, nil, "&innodb_snapshot_isolation=ON")
			var on int
			if err := db.Raw("SELECT @@innodb_snapshot_isolation").Row().Scan(&on); err != nil || on != 1 {
				t.Fatalf("innodb_snapshot_isolation %d, %v: the test needs a MariaDB that has it (10.6.18, 10.11.8, 11.x)", on, err)
			}
			opts := &msgx.Options{MaxAttempts: 1} // a conflict the handler returned is not counted
			if ignore {
				opts = nil // an ignored one is the handler's failure, counted (record.ErrTxAborted)
			}
			var gopts *idemkit.Options
			if c.perms { // a classifier calling every error permanent: a conflict is still retried
				gopts = &idemkit.Options{IsPermanent: func(error) bool { return true }}
			}
			f := newTx(t, db, gopts, opts)
			rows := testsvc.RowsTable(t, f.db)
			ctx := context.Background()
			var conflict error
			h := f.mg.Tx(f.db, f.records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
				if err := tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 10).Error; err != nil {
					return err
				}
				var v int
				if err := tx.Raw("SELECT v FROM " + rows + " WHERE id = 1").Row().Scan(&v); err != nil { // the read view
					return err
				}
				if conflict != nil { // the redelivery: no concurrent writer
					return tx.Exec("UPDATE " + rows + " SET v = v + 1 WHERE id = 1").Error
				}
				if err := f.db.Exec("UPDATE " + rows + " SET v = v + 100 WHERE id = 1").Error; err != nil { // another writer, committed
					return err
				}
				conflict = tx.Exec("UPDATE " + rows + " SET v = v + 1 WHERE id = 1").Error
				if !ignore {
					return conflict
				}
				_ = tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 20).Error // would commit on its own
				return nil
			})
			d := h(ctx, msg("si-"+name))
			var my *mysql.MySQLError
			if !errors.As(conflict, &my) || my.Number != 1020 {
				t.Fatalf("the handler's update: %v, want error 1020 (no write conflict)", conflict)
			}
			n, s := f.effectsOf(t, "si-"+name), f.status(t, "si-"+name)
			var first int // the effect written before the conflict
			if err := f.db.Raw("SELECT count(*) FROM "+f.effects+" WHERE msg_id = ? AND amount = 10", "si-"+name).Row().Scan(&first); err != nil {
				t.Fatal(err)
			}
			if d.Action == msgx.Ack && first != 1 {
				t.Fatalf("decision %v with record %q and %d rows, none its first write: the message was acknowledged without its effect", d, s, n)
			}
			if d.Action != msgx.Retry || d.Outcome != msgx.Failed || n != 0 || s != "" {
				t.Fatalf("decision %v with %d effects and record %q: want a retry (Failed), neither effect nor record", d, n, s)
			}
			d = h(ctx, msg("si-"+name))
			want(t, d, msgx.Ack, msgx.Processed)
			if n := f.effectsOf(t, "si-"+name); n != 1 {
				t.Fatalf("%d effects after the redelivery, want 1", n)
			}
		})
	}
}
