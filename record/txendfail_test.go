package record

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestFailedTxEndDoesNotLeaveTheTransactionOnThePool: on a Galera node that lost the primary
// component, COMMIT and ROLLBACK fail with error 1047 and the server keeps the transaction open, and
// database/sql puts a connection whose Commit or Rollback returned a server's error back into the
// pool. A Guard-owned transaction (Store.Tx, Store.SQLTx) whose end failed so left its business writes
// open on a pooled connection: the next autocommit statement on it joined them and was never
// committed, and the next BEGIN on it committed them — half a transaction the Guard reported as not
// done (found by a Galera fault test: a transfer applied twice, a balance off by one transfer). The
// Store now ends such a transaction itself: after a failed COMMIT it rolls back on the connection, and
// a connection whose ROLLBACK failed is closed, never reused.
func TestFailedTxEndDoesNotLeaveTheTransactionOnThePool(t *testing.T) {
	fc, db, _ := testsvc.FailEndsMySQL(t)
	other, err := sql.Open("mysql", testsvc.MySQLDSN()+testsvc.Database) // an independent observer
	must(t, err)
	t.Cleanup(func() { _ = other.Close() })

	s := newTable(t, db)
	biz := testsvc.Name("t_biz_")
	testsvc.DropTable(t, db, biz)
	must(t, db.Exec("CREATE TABLE "+biz+" (k VARCHAR(64) NOT NULL)").Error)
	g, err := idemkit.New(s, nil)
	must(t, err)
	retryable := errors.New("flaky")
	rows := func(k string) int {
		var n int
		must(t, other.QueryRow("SELECT COUNT(*) FROM "+biz+" WHERE k = ?", k).Scan(&n))
		return n
	}

	for _, tc := range []struct{ flavour, end string }{
		{"gorm", "rollback"}, {"gorm", "commit"}, {"sql", "rollback"}, {"sql", "commit"},
	} {
		t.Run(tc.flavour+"/"+tc.end, func(t *testing.T) {
			key := tc.flavour + "-" + tc.end
			fail := func(ctx context.Context, exec func(query string, args ...any) error) ([]byte, error) {
				if err := exec("INSERT INTO "+biz+" (k) VALUES (?)", key); err != nil {
					return nil, err
				}
				if tc.end == "rollback" {
					return nil, retryable // the Guard rolls back
				}
				return []byte("ok"), nil // the Guard commits
			}
			fc.FailCommit.Store(tc.end == "commit")
			fc.FailRollback.Store(tc.end == "rollback")
			call := idemkit.Call{Scope: "endfail", Key: key}
			if tc.flavour == "sql" {
				_, err = s.SQLTx(ctxb, g, call, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
					return fail(ctx, func(q string, args ...any) error { _, err := tx.ExecContext(ctx, q, args...); return err })
				})
			} else {
				_, err = s.Tx(ctxb, g, call, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
					return fail(ctx, func(q string, args ...any) error { return tx.Exec(q, args...).Error })
				})
			}
			fc.FailCommit.Store(false)
			fc.FailRollback.Store(false)
			if err == nil {
				t.Fatalf("the call succeeded; want the failed %s's error", tc.end)
			}
			// The pool's next autocommit statement must commit on its own, and the failed
			// transaction's business write must never commit.
			after := key + "-after"
			must(t, db.Exec("INSERT INTO "+biz+" (k) VALUES (?)", after).Error)
			must(t, db.Transaction(func(tx *gorm.DB) error { return tx.Exec("INSERT INTO "+biz+" (k) VALUES (?)", after+"-tx").Error }))
			if n := rows(after); n != 1 {
				t.Errorf("an autocommit INSERT after the failed %s: %d rows seen by another connection, want 1 (it joined the transaction left open on the pooled connection)", tc.end, n)
			}
			if n := rows(key); n != 0 {
				t.Errorf("the business write of the transaction whose %s failed: %d rows committed, want 0", tc.end, n)
			}
		})
	}
}
