package record

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
)

// TestTxImplicitCommitIsRefused: on MySQL and MariaDB a statement such as DDL, LOCK TABLES or SET
// autocommit commits the transaction it is sent in. Run by a function guarded by Store.Tx, it
// committed the function's writes before it apart from their record: when the function then failed
// (a retryable error frees the key), its retry ran them again and the effect was doubled. Such
// statements are refused as a raw COMMIT is; on PostgreSQL and SQLite, where DDL is transactional,
// they run and roll back with the function's writes.
func TestTxImplicitCommitIsRefused(t *testing.T) {
	eachTxBackend(t, func(t *testing.T, b backend) {
		f := newTxFixture(t, b, nil)
		other := f.biz + "_ddl"
		t.Cleanup(func() { _ = f.db.Exec("DROP TABLE IF EXISTS " + other).Error })
		mysql := f.db.Dialector.Name() == "mysql"
		stmts := []string{"CREATE TABLE IF NOT EXISTS " + other + " (id INT)"}
		if mysql {
			must(t, f.db.Exec("CREATE TABLE IF NOT EXISTS "+other+" (id INT)").Error)
			stmts = append(stmts, "TRUNCATE TABLE "+other, "ALTER TABLE "+other+" ADD COLUMN IF NOT EXISTS c INT",
				"LOCK TABLES "+other+" WRITE", " set autocommit = 1", "DROP TABLE IF EXISTS "+other+"_none")
		}
		retry := errors.New("fails after the statement: retry")
		for i, stmt := range stmts {
			key := "implicit-" + string(rune('a'+i))
			var stmtErr error
			_, err := f.store.Tx(ctxb, f.guard, idemkit.Call{Scope: "implicit", Key: key}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
				if err := tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, 1)", key).Error; err != nil {
					return nil, err
				}
				stmtErr = tx.Exec(stmt).Error
				return nil, retry
			})
			if !errors.Is(err, retry) {
				t.Fatalf("%q: first call %v, want the function's error", stmt, err)
			}
			if mysql && stmtErr == nil {
				t.Errorf("%q ran in the Guard's transaction", stmt)
			}
			if !mysql && stmtErr != nil {
				t.Errorf("%q refused where DDL is transactional: %v", stmt, stmtErr)
			}
			if _, err := f.store.Tx(ctxb, f.guard, idemkit.Call{Scope: "implicit", Key: key}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
				return []byte("ok"), tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, 2)", key).Error
			}); err != nil {
				t.Fatalf("%q: retry %v", stmt, err)
			}
			var n int
			must(t, f.db.Raw("SELECT count(*) FROM "+f.biz+" WHERE k = ?", key).Row().Scan(&n))
			if n != 1 {
				t.Errorf("%q: %d business rows after a failed call and its retry, want 1 (the statement's error: %v)", stmt, n, stmtErr)
			}
		}
		if mysql { // a temporary table's CREATE and DROP do not commit
			_, err := f.store.Tx(ctxb, f.guard, idemkit.Call{Scope: "implicit", Key: "temporary"}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
				if err := tx.Exec("CREATE TEMPORARY TABLE " + other + "_tmp (id INT)").Error; err != nil {
					return nil, err
				}
				return []byte("ok"), tx.Exec("DROP TEMPORARY TABLE " + other + "_tmp").Error
			})
			if err != nil {
				t.Errorf("temporary table: %v", err)
			}
		}
	})
}

func TestCommitsImplicitly(t *testing.T) {
	for q, want := range map[string]bool{
		"CREATE TABLE t (id INT)": true, "create or replace table t (id int)": true, "CREATE INDEX i ON t (c)": true,
		"CREATE TEMPORARY TABLE t (id INT)": false, "create or replace temporary table t (id int)": false,
		"DROP TABLE t": true, "DROP TEMPORARY TABLE t": false, "ALTER TABLE t ADD c INT": true, "TRUNCATE t": true,
		"RENAME TABLE a TO b": true, "LOCK TABLES t WRITE": true, "UNLOCK TABLES": true, "SET autocommit = 1": true,
		"SET @@session.AUTOCOMMIT = ON": true, "SET PASSWORD = 'x'": true, "SET @x = 1": false, "GRANT ALL ON *.* TO u": true,
		"ANALYZE TABLE t": true, "CHECK TABLE t": true, "OPTIMIZE TABLE t": true, "CACHE INDEX t IN c": true,
		"LOAD INDEX INTO CACHE t": true, "LOAD DATA INFILE 'f' INTO TABLE t": false, "FLUSH TABLES": true,
		"START SLAVE": true, "STOP REPLICA": true, "XA START 'x'": true, "SELECT 1": false,
		"INSERT INTO t VALUES (1)": false, "UPDATE t SET autocommit_flag = 1": false, "SAVEPOINT s": false,
	} {
		if got := commitsImplicitly(q); got != want {
			t.Errorf("commitsImplicitly(%q) = %v, want %v", q, got, want)
		}
	}
}
