package sqlcount_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit/internal/sqlcount"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestCounts: statements are counted once each, whether sent as text or through a server-side
// prepared statement; those between BEGIN and COMMIT/ROLLBACK count as inside the transaction, and
// only those; a transaction run as text on a held connection counts as one begun by database/sql,
// and a statement sent with its COMMIT in one packet is one round trip.
func TestCounts(t *testing.T) {
	testsvc.MySQL(t, nil) // creates the test database, or fails/skips without MariaDB
	cfg, err := mysql.ParseDSN(testsvc.MySQLDSN() + testsvc.Database)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MultiStatements = true // for the transaction run as text below
	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := sqlcount.New(inner)
	db := sql.OpenDB(c)
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	step := func(what string, want sqlcount.Counts, f func() error) {
		t.Helper()
		before := c.Counts()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := c.Counts().Sub(before); got != want {
			t.Errorf("%s: counted %+v, want %+v", what, got, want)
		}
	}
	step("a statement outside a transaction", sqlcount.Counts{Statements: 1, RoundTrips: 1}, func() error {
		_, err := db.ExecContext(ctx, "DO 1")
		return err
	})
	step("a statement with an argument (prepared: interpolateParams is off)", sqlcount.Counts{Statements: 1, Prepares: 1, RoundTrips: 2}, func() error {
		var n int
		return db.QueryRowContext(ctx, "SELECT ?", 7).Scan(&n)
	})
	step("two statements in a committed transaction", sqlcount.Counts{Statements: 2, Prepares: 1, InTx: 2, Begins: 1, Commits: 1, RoundTrips: 5}, func() error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.ExecContext(ctx, "DO 1"); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT ?", 7).Scan(&n); err != nil {
			return err
		}
		return tx.Commit()
	})
	step("a statement after the commit", sqlcount.Counts{Statements: 1, RoundTrips: 1}, func() error {
		_, err := db.ExecContext(ctx, "DO 1")
		return err
	})
	step("a statement in a rolled-back transaction", sqlcount.Counts{Statements: 1, InTx: 1, Begins: 1, Rollbacks: 1, RoundTrips: 3}, func() error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "DO 1"); err != nil {
			return err
		}
		return tx.Rollback()
	})
	// onConn sends queries, one packet each, on one held connection.
	onConn := func(queries ...string) func() error {
		return func() error {
			conn, err := db.Conn(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			for _, q := range queries {
				if _, err := conn.ExecContext(ctx, q); err != nil {
					return err
				}
			}
			return nil
		}
	}
	step("a transaction run as text, the last statement and COMMIT in one packet",
		sqlcount.Counts{Statements: 2, InTx: 2, Begins: 1, Commits: 1, RoundTrips: 3},
		onConn("START TRANSACTION", "DO 1", "DO 1; COMMIT"))
	step("a transaction run as text in two packets, START TRANSACTION with the first statement",
		sqlcount.Counts{Statements: 2, InTx: 2, Begins: 1, Commits: 1, RoundTrips: 2},
		onConn("START TRANSACTION; DO 1", "DO 1; COMMIT"))
	step("a transaction run as text in one packet",
		sqlcount.Counts{Statements: 1, InTx: 1, Begins: 1, Commits: 1, RoundTrips: 1},
		onConn("START TRANSACTION; DO 1; COMMIT"))
	step("a transaction run as text and rolled back",
		sqlcount.Counts{Statements: 1, InTx: 1, Begins: 1, Rollbacks: 1, RoundTrips: 3},
		onConn("start transaction", "DO 1", " rollback "))
	step("a transaction run as text, ROLLBACK and a statement after it in one packet",
		sqlcount.Counts{Statements: 2, InTx: 1, Begins: 1, Rollbacks: 1, RoundTrips: 2},
		onConn("START TRANSACTION; DO 1", "ROLLBACK; DO 1"))
}
