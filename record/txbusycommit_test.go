package record

import (
	"context"
	"database/sql"
	"testing"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
)

// TestBusyCommitLeavesNoTransactionOpen: in SQLite's default (rollback journal) mode a COMMIT waits
// for the readers to finish, and when they outlast the busy timeout it fails with SQLITE_BUSY and
// the transaction stays open — database/sql then puts the connection back into the pool with it. A
// Guard-owned transaction ends such a transaction itself (internal/ownedtx), but on a gorm.DB in
// PrepareStmt mode it was gorm's: the next call on that pooled connection ran inside the transaction
// left open (its claim and finish answered success and never committed) and the file stayed locked
// for every other connection. With and without PrepareStmt, the next call must commit on its own.
func TestBusyCommitLeavesNoTransactionOpen(t *testing.T) {
	for _, prepare := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "PrepareStmt"}[prepare]
		t.Run(name, func(t *testing.T) {
			// The next call gets the connection the failed COMMIT left. A reader holds the file's
			// shared lock, so the COMMIT cannot get the exclusive one.
			_, s, other, reader := besideAReader(t, t.TempDir()+"/busy.db?_pragma=busy_timeout(200)", prepare)
			g, err := idemkit.New(s, nil)
			must(t, err)
			_, err = s.Tx(ctxb, g, idemkit.Call{Scope: "busy", Key: "k1"}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
				return []byte("one"), tx.Exec("INSERT INTO biz (k) VALUES ('k1')").Error
			})
			if err == nil {
				t.Fatal("the COMMIT succeeded beside an open reader; want SQLITE_BUSY")
			}
			_, err = reader.ExecContext(ctxb, "ROLLBACK")
			must(t, err)
			must(t, reader.Close())

			res, err := g.Do(ctxb, idemkit.Call{Scope: "busy", Key: "k2"}, func(context.Context) ([]byte, error) { return []byte("two"), nil })
			must(t, err)
			var recs, bizRows int
			if err := other.QueryRow("SELECT COUNT(*) FROM " + s.Table() + " WHERE idem_key = 'k2'").Scan(&recs); err != nil {
				t.Fatalf("another connection cannot read the file after the failed COMMIT (a transaction left open holds its lock): %v", err)
			}
			must(t, other.QueryRow("SELECT COUNT(*) FROM biz").Scan(&bizRows))
			if recs != 1 {
				t.Errorf("Do answered %q for k2, but another connection sees %d records of it: it ran in the transaction the failed COMMIT left open", res.Value, recs)
			}
			if bizRows != 0 {
				t.Errorf("the business write of the transaction whose COMMIT failed: %d rows committed, want 0", bizRows)
			}
			// And a guarded transaction commits as usual again.
			_, err = s.Tx(ctxb, g, idemkit.Call{Scope: "busy", Key: "k3"}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
				return []byte("three"), tx.Exec("INSERT INTO biz (k) VALUES ('k3')").Error
			})
			must(t, err)
			must(t, other.QueryRow("SELECT COUNT(*) FROM biz WHERE k = 'k3'").Scan(&bizRows))
			if bizRows != 1 {
				t.Errorf("the business write of a guarded transaction after it: %d rows committed, want 1", bizRows)
			}
		})
	}
}

// TestCallerCommitBesideAReader holds what the package doc tells SQLite users who commit
// transactions of their own on the Store's pool (DoTx here): in WAL mode such a COMMIT beside
// another connection's open read does not wait for it, so it commits, and the pool's next claim
// commits on its own. (In the default rollback-journal mode the COMMIT fails with SQLITE_BUSY and
// leaves the transaction open on the pooled connection: the claim after it answers success and
// never commits — what the doc warns of.)
func TestCallerCommitBesideAReader(t *testing.T) {
	// The claim after the COMMIT gets its connection.
	db, s, other, reader := besideAReader(t, t.TempDir()+"/wal.db?_pragma=busy_timeout(200)&_pragma=journal_mode(WAL)", false)
	g, err := idemkit.New(s, nil)
	must(t, err)

	err = db.Transaction(func(tx *gorm.DB) error {
		_, err := g.DoTx(ctxb, s.WithTx(tx), idemkit.Call{Scope: "reader", Key: "k1"}, func(ctx context.Context) ([]byte, error) {
			return []byte("one"), tx.Exec("INSERT INTO biz (k) VALUES ('k1')").Error
		})
		return err
	})
	if err != nil {
		t.Fatalf("the caller's COMMIT beside an open reader in WAL mode: %v; want it committed", err)
	}
	_, err = g.Do(ctxb, idemkit.Call{Scope: "reader", Key: "k2"}, func(context.Context) ([]byte, error) { return []byte("two"), nil })
	must(t, err)
	_, err = reader.ExecContext(ctxb, "ROLLBACK")
	must(t, err)
	must(t, reader.Close())
	var recs, bizRows int
	must(t, other.QueryRow("SELECT COUNT(*) FROM "+s.Table()).Scan(&recs))
	must(t, other.QueryRow("SELECT COUNT(*) FROM biz").Scan(&bizRows))
	if recs != 2 || bizRows != 1 {
		t.Fatalf("another connection sees %d records and %d business rows; want 2 and 1, committed", recs, bizRows)
	}
}

// besideAReader opens the SQLite file of dsn on a gorm.DB of one connection (PrepareStmt as
// prepare) with a record table and a table biz, and another connection to it (another process's)
// whose transaction, reader, has read biz and stays open: the connection and reader are the
// caller's to end.
func besideAReader(t *testing.T, dsn string, prepare bool) (db *gorm.DB, s *Store, other *sql.DB, reader *sql.Conn) {
	t.Helper()
	db, err := gorm.Open(sqlite.Open(dsn), &gorm.Config{Logger: logger.Discard, PrepareStmt: prepare})
	must(t, err)
	sqlDB, err := db.DB()
	must(t, err)
	sqlDB.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = sqlDB.Close() })
	s = newTable(t, db)
	must(t, db.Exec("CREATE TABLE biz (k TEXT NOT NULL)").Error)
	other, err = sql.Open("sqlite", dsn)
	must(t, err)
	t.Cleanup(func() { _ = other.Close() })
	reader, err = other.Conn(ctxb)
	must(t, err)
	_, err = reader.ExecContext(ctxb, "BEGIN")
	must(t, err)
	var n int
	must(t, reader.QueryRowContext(ctxb, "SELECT COUNT(*) FROM biz").Scan(&n))
	return db, s, other, reader
}
