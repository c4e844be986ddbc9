package record

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"

	"github.com/glebarez/sqlite"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/sqlcount"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/memory"
)

// countedDB opens b on a pool whose driver counts every statement (package sqlcount): what the
// server receives, whoever sends it. On MySQL the DSN does not set interpolateParams, so the Store
// runs on prepared statements.
func countedDB(t testing.TB, b backend, cfg *gorm.Config) (*gorm.DB, *sqlcount.Counter) {
	t.Helper()
	b.db(t, nil) // creates the test database, or skips/fails when the service is missing
	var (
		inner driver.Connector
		dial  func(*sql.DB) gorm.Dialector
	)
	switch b.name {
	case "MariaDB", multiBackend.name:
		mc, err := gomysql.ParseDSN(testsvc.MySQLDSN() + testsvc.Database + "?timeout=3s")
		must(t, err)
		if b.name == multiBackend.name {
			mc.MultiStatements, mc.InterpolateParams = true, true
		}
		c, err := gomysql.NewConnector(mc)
		must(t, err)
		inner = c
		dial = func(db *sql.DB) gorm.Dialector { return gormmysql.New(gormmysql.Config{Conn: db, DSNConfig: mc}) }
	case "PostgreSQL":
		pc, err := pgx.ParseConfig(testsvc.PostgresDSN() + " dbname=" + testsvc.Database)
		must(t, err)
		inner = stdlib.GetConnector(*pc)
		dial = func(db *sql.DB) gorm.Dialector { return postgres.New(postgres.Config{Conn: db}) }
	default:
		path := t.TempDir() + "/budget.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
		raw, err := sql.Open("sqlite", path)
		must(t, err)
		inner = dsnConnector{d: raw.Driver(), dsn: path}
		_ = raw.Close()
		dial = func(db *sql.DB) gorm.Dialector { return &sqlite.Dialector{Conn: db} }
	}
	n := sqlcount.New(inner)
	sqlDB := sql.OpenDB(n)
	sqlDB.SetMaxOpenConns(maxConns)
	t.Cleanup(func() { _ = sqlDB.Close() })
	if cfg == nil {
		cfg = &gorm.Config{Logger: logger.Discard}
	}
	db, err := gorm.Open(dial(sqlDB), cfg)
	must(t, err)
	return db, n
}

// dsnConnector opens connections of a driver without a DriverContext.
type dsnConnector struct {
	d   driver.Driver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

// delta returns what f sent.
func delta(n *sqlcount.Counter, f func()) sqlcount.Counts {
	before := n.Counts()
	f()
	return n.Counts().Sub(before)
}

func TestStatementBudget(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		t.Run("Default", func(t *testing.T) { statementBudget(t, b, nil) })
		t.Run("PrepareStmt", func(t *testing.T) {
			statementBudget(t, b, &gorm.Config{PrepareStmt: true, Logger: logger.Discard})
		})
	})
}

// statementBudget asserts the statements of every mode at the driver, on b: the Store's own, the
// business's, BEGIN and COMMIT counted apart. Each guarded business is one INSERT.
func statementBudget(t *testing.T, b backend, cfg *gorm.Config) {
	db, n := countedDB(t, b, cfg)
	s := newTable(t, db)
	biz := bizTable(t, db)
	insertBiz := "INSERT INTO " + biz + " (k, fence) VALUES (?, ?)"
	noLock, err := idemkit.New(s, nil)
	must(t, err)
	locked, err := idemkit.New(s, &idemkit.Options{Locker: memory.NewLocker(nil)})
	must(t, err)
	want := func(name string, d sqlcount.Counts, stmts, begins int64) {
		t.Helper()
		if d.Statements != stmts || d.Begins != begins || d.Commits+d.Rollbacks != begins {
			t.Errorf("%s: %d statements, %d BEGIN, %d COMMIT, %d ROLLBACK; want %d statements in %d transactions",
				name, d.Statements, d.Begins, d.Commits, d.Rollbacks, stmts, begins)
		} else {
			t.Logf("%-44s %d statements, %d transactions (%d prepares)", name, d.Statements, d.Begins, d.Prepares)
		}
	}
	fn := func(context.Context) ([]byte, error) { return []byte("r"), nil }
	warm := func(g *idemkit.Guard, scope string) { // prepares statements on a connection, outside the counts
		_, err := g.Do(ctxb, idemkit.Call{Scope: scope, Key: "warm"}, fn)
		must(t, err)
		_, err = g.Do(ctxb, idemkit.Call{Scope: scope, Key: "warm"}, fn)
		must(t, err)
	}
	warm(noLock, "warm-a")
	warm(locked, "warm-b")
	tx, err := s.BeginTx(ctxb) // the Store finds out whether the pool allows multi-statement packets
	must(t, err)
	must(t, tx.Rollback())

	call := idemkit.Call{Scope: "budget", Key: "execute"}
	want("Execute, new key", delta(n, func() { _, err := noLock.Do(ctxb, call, fn); must(t, err) }), 2, 0)
	want("Execute, uncached replay (conflict, read)", delta(n, func() {
		res, err := noLock.Do(ctxb, call, fn)
		must(t, err)
		if !res.Replayed {
			t.Error("second call was not a replay")
		}
	}), 2, 0)

	// Tx mode, guard-owned: the final record is the one statement in the transaction beside the
	// business's; without a Locker, one read before it.
	txFn := func(key string) TxFunc {
		return func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
			return []byte("r"), tx.Exec(insertBiz, key, 1).Error
		}
	}
	want("Tx with a Locker, new key", delta(n, func() {
		_, err := s.Tx(ctxb, locked, idemkit.Call{Scope: "budget", Key: "tx"}, txFn("tx"))
		must(t, err)
	}), 1+1, 1)
	want("Tx with a Locker, cached replay", delta(n, func() {
		res, err := s.Tx(ctxb, locked, idemkit.Call{Scope: "budget", Key: "tx"}, txFn("tx"))
		must(t, err)
		if !res.Replayed {
			t.Error("Tx duplicate was not a replay")
		}
	}), 0, 0)
	want("Tx without a Locker, new key", delta(n, func() {
		_, err := s.Tx(ctxb, noLock, idemkit.Call{Scope: "budget", Key: "tx-nolock"}, txFn("tx-nolock"))
		must(t, err)
	}), 1+1+1, 1)
	want("Tx without a Locker, replay (one read)", delta(n, func() {
		res, err := s.Tx(ctxb, noLock, idemkit.Call{Scope: "budget", Key: "tx-nolock"}, txFn("tx-nolock"))
		must(t, err)
		if !res.Replayed {
			t.Error("Tx duplicate was not a replay")
		}
	}), 1, 0)

	// DoTx, caller-owned: a read without a lock, then the final record, in the caller's transaction.
	var inTx sqlcount.Counts
	must(t, db.Transaction(func(tx *gorm.DB) error {
		inTx = delta(n, func() {
			_, err := locked.DoTx(ctxb, s.WithTx(tx), idemkit.Call{Scope: "budget", Key: "dotx"}, func(ctx context.Context) ([]byte, error) {
				return []byte("r"), tx.Exec(insertBiz, "dotx", 1).Error
			})
			must(t, err)
		})
		return nil
	}))
	want("DoTx, new key (inside the transaction)", inTx, 1+2, 0)

	// MarkTx: the business's own insert plus exactly one.
	must(t, db.Transaction(func(tx *gorm.DB) error {
		inTx = delta(n, func() {
			err := noLock.MarkTx(ctxb, s.WithTx(tx), idemkit.Call{Scope: "budget", Key: "marktx"}, func(ctx context.Context) error {
				return tx.Exec(insertBiz, "marktx", 1).Error
			})
			must(t, err)
		})
		return nil
	}))
	want("MarkTx, new key (inside the transaction)", inTx, 1+1, 0)

	// TxMark, guard-owned: the same two statements, in the transaction the Guard begins and commits.
	want("TxMark, new key", delta(n, func() {
		must(t, s.TxMark(ctxb, noLock, idemkit.Call{Scope: "budget", Key: "txmark"}, func(ctx context.Context, tx *gorm.DB) error {
			return tx.Exec(insertBiz, "txmark", 1).Error
		}))
	}), 1+1, 1)
	want("TxMark without a Locker, duplicate (conflict, read; rolled back)", delta(n, func() {
		err := s.TxMark(ctxb, noLock, idemkit.Call{Scope: "budget", Key: "txmark"}, func(ctx context.Context, tx *gorm.DB) error {
			t.Error("TxMark duplicate ran its function")
			return nil
		})
		if !errors.Is(err, idemkit.ErrDuplicate) {
			t.Errorf("TxMark duplicate: %v, want ErrDuplicate", err)
		}
	}), 2, 1)

	// On MySQL without interpolateParams the Store's statements are prepared once per connection, in
	// a transaction as outside one: n new keys in Tx mode prepare the business's INSERT n times (the
	// driver prepares every statement with arguments; gorm's PrepareStmt prepares it again in every
	// transaction) and the Store's own at most once per connection. Re-preparing the record's INSERT
	// in every transaction would make it 2n.
	if b.name == "MariaDB" {
		const keys = 30
		d := delta(n, func() {
			for i := range keys {
				key := fmt.Sprintf("tx-prepared-%d", i)
				_, err := s.Tx(ctxb, noLock, idemkit.Call{Scope: "budget", Key: key}, txFn(key))
				must(t, err)
			}
		})
		if limit := int64(keys + maxConns); d.Prepares > limit {
			t.Errorf("%d new keys in Tx mode prepared %d statements, want at most %d: the Store's are prepared again in every transaction", keys, d.Prepares, limit)
		} else {
			t.Logf("%d new keys in Tx mode: %d prepares", keys, d.Prepares)
		}
	}

	// A replay served by the Locker's cache touches no database.
	call = idemkit.Call{Scope: "budget", Key: "cached"}
	want("Execute with a Locker, new key", delta(n, func() { _, err := locked.Do(ctxb, call, fn); must(t, err) }), 2, 0)
	want("Execute with a Locker, cached replay", delta(n, func() {
		res, err := locked.Do(ctxb, call, fn)
		must(t, err)
		if !res.Replayed || string(res.Value) != "r" {
			t.Errorf("cached replay: %+v", res)
		}
	}), 0, 0)
}

// TestUpdateNoOpIsNotFenced: an Update that writes exactly what is stored succeeds on every database
// (MySQL reports the row as unchanged; one more SELECT confirms it), also inside a transaction; the
// extra statement is only spent on that rare path.
func TestUpdateNoOpIsNotFenced(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		db, n := countedDB(t, b, nil)
		s := newTable(t, db)
		rec := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusSucceeded, Fence: 3, Owner: "o", Response: []byte("x")}
		must(t, s.Insert(ctxb, rec))
		want := int64(1)
		if s.Dialect() == dialectMySQL {
			want = 2
		}
		if d := delta(n, func() { must(t, s.Update(ctxb, rec, rec.Version())) }); d.Statements != want {
			t.Errorf("no-op update: %d statements, want %d", d.Statements, want)
		}
		must(t, db.Transaction(func(tx *gorm.DB) error { return s.WithTx(tx).Update(ctxb, rec, rec.Version()) }))
		stale := *rec
		stale.Fence = 2
		if err := s.Update(ctxb, &stale, stale.Version()); err != idemkit.ErrFenced {
			t.Fatalf("update of a stale version = %v, want ErrFenced", err)
		}
	})
}
