// Package ownedtx begins the transactions idemkit itself commits or rolls back (a Guard-owned
// Tx-mode transaction: record.Store.Tx and SQLTx, msgx's Tx mode; admin's checked release and purge)
// so that one whose end failed never goes back to the pool still open.
//
// database/sql returns a connection to its pool when Commit or Rollback fails with the server's error,
// trusting the server ended the transaction. A Galera node that lost its primary component does not:
// it answers COMMIT and ROLLBACK with error 1047 and keeps the transaction open. Nor does SQLite when a
// COMMIT fails with SQLITE_BUSY (in rollback-journal mode it waits for the readers to finish, up to
// the busy timeout): the transaction stays open, its locks held. The next user of the pooled
// connection then joined it (an autocommit statement never committed) or committed it (its BEGIN
// commits implicitly on MySQL): half of a transaction idemkit reported as not done. A [Tx] holds a
// connection of its own for the transaction — on a gorm.DB in PrepareStmt mode too —: after a failed
// COMMIT it sends ROLLBACK on it, and a connection whose ROLLBACK failed is closed, never reused.
//
// [Conflict] tells the driver errors of a transaction the database rolled back whole on a write
// conflict, which its owner may run again from its start.
package ownedtx

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"time"

	"gorm.io/gorm"
)

// EndTimeout bounds the ROLLBACK sent after a failed COMMIT.
const EndTimeout = 5 * time.Second

// Tx is a transaction on a connection it holds until it ends.
type Tx struct {
	// Gorm is the transaction as a gorm session, when it was begun with [BeginGorm].
	Gorm *gorm.DB
	// SQL is the transaction as a *sql.Tx, when it was begun with [BeginSQL].
	SQL  *sql.Tx
	conn *sql.Conn
}

// BeginGorm begins a transaction on db, as db.Begin() does. When db's pool is a *sql.DB, or a
// PrepareStmt session's pool over one (gorm.Config's, a Session's, or both: the transaction is then a
// prepared transaction sharing the session's statements), the transaction holds a connection of its own ([Tx]); otherwise (a pool of
// another type) it is db.Begin()'s.
func BeginGorm(ctx context.Context, db *gorm.DB) (*Tx, error) {
	sess := db.WithContext(ctx) // a session: its Statement is its own
	pool, prepared := ownable(sess.Statement.ConnPool)
	if pool == nil {
		gtx := sess.Begin()
		return &Tx{Gorm: gtx}, gtx.Error
	}
	var gtx *gorm.DB
	conn, err := onConn(ctx, pool, func(conn *sql.Conn) error {
		var cp gorm.ConnPool = conn // *sql.Conn begins its transactions on itself
		if prepared != nil {
			// gorm's prepared transaction, begun on conn: statements prepared on the pool are
			// bound to it, others are prepared in it, as db.Begin() does on the pool.
			cp = &gorm.PreparedStmtDB{Stmts: prepared.Stmts, Mux: prepared.Mux, ConnPool: heldConn{conn, pool}}
		}
		sess.Statement.ConnPool = cp
		gtx = sess.Begin()
		return gtx.Error
	})
	if err != nil {
		return nil, err
	}
	return &Tx{Gorm: gtx, conn: conn}, nil
}

// ownable returns the *sql.DB under p when a transaction begun on p can hold a connection of that pool
// of its own: p itself, or the pool under a PrepareStmt session's p, returned too (gorm.Config or
// gorm.Session PrepareStmt). A Session with PrepareStmt on a gorm.DB opened with it (or on another
// such Session) wraps that pool's PreparedStmtDB in one more, sharing its statement cache: the pool is
// the one under them all. It returns nil for a transaction (*sql.Tx, a prepared transaction) and for
// pools of other types.
func ownable(p gorm.ConnPool) (*sql.DB, *gorm.PreparedStmtDB) {
	switch v := p.(type) {
	case *sql.DB:
		return v, nil
	case *gorm.PreparedStmtDB:
		under := v.ConnPool
		for {
			inner, ok := under.(*gorm.PreparedStmtDB)
			if !ok {
				break
			}
			under = inner.ConnPool
		}
		if pool, ok := under.(*sql.DB); ok {
			return pool, v
		}
	}
	return nil, nil
}

// heldConn is a connection held for a PrepareStmt session's transaction. It names its pool to gorm
// (gorm.GetDBConnector), as the session's *sql.DB does: the transaction's DB() is the pool's.
type heldConn struct {
	*sql.Conn
	pool *sql.DB
}

func (c heldConn) GetDBConn() (*sql.DB, error) { return c.pool, nil }

// BeginSQL begins a transaction on db on a connection of its own.
func BeginSQL(ctx context.Context, db *sql.DB) (*Tx, error) {
	var stx *sql.Tx
	conn, err := onConn(ctx, db, func(conn *sql.Conn) (err error) {
		stx, err = conn.BeginTx(ctx, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Tx{SQL: stx, conn: conn}, nil
}

// BadConnRetries bounds the runs again on another connection after one found bad, besides one per
// connection idle in the pool (see [OnLive]).
const BadConnRetries = 2

// OnLive runs f, the first statement sent on c, a connection just taken from pool (nil: OnLive takes
// one), and when it fails with driver.ErrBadConn runs it again on another connection; it returns the
// connection f last ran on (nil when none could be taken) and f's error. The MySQL driver checks a
// pooled connection at its first write and reports one the server closed while it was idle
// (wait_timeout, a KILL, a node restarted) with driver.ErrBadConn, having sent nothing; database/sql
// closes it and runs the statement again on another connection in DB.BeginTx and every statement of
// the pool, but not on a *sql.Conn. Every idle connection of the pool may be stale, and the pool hands
// them out before it opens a new one: the retries go past them.
func OnLive(ctx context.Context, pool *sql.DB, c *sql.Conn, f func(*sql.Conn) error) (*sql.Conn, error) {
	if c == nil {
		var err error
		if c, err = pool.Conn(ctx); err != nil {
			return nil, err
		}
	}
	err := f(c)
	if !errors.Is(err, driver.ErrBadConn) {
		return c, err
	}
	for retries := BadConnRetries + pool.Stats().Idle; retries > 0 && errors.Is(err, driver.ErrBadConn); retries-- {
		_ = c.Close() // closed already, by database/sql
		var cerr error
		if c, cerr = pool.Conn(ctx); cerr != nil {
			return nil, cerr
		}
		err = f(c)
	}
	return c, err
}

// onConn takes a connection of pool's own and begins a transaction on it with begin, on another
// connection when the first is found stale ([OnLive]); a connection whose begin failed goes back.
func onConn(ctx context.Context, pool *sql.DB, begin func(*sql.Conn) error) (*sql.Conn, error) {
	conn, err := OnLive(ctx, pool, nil, begin)
	if err != nil {
		if conn != nil {
			_ = conn.Close()
		}
		return nil, err
	}
	return conn, nil
}

// end sends COMMIT (commit) or ROLLBACK through the transaction, gorm's or database/sql's.
func (t *Tx) end(commit bool) error {
	switch {
	case t.Gorm != nil && commit:
		return t.Gorm.Commit().Error
	case t.Gorm != nil:
		return t.Gorm.Rollback().Error
	case commit:
		return t.SQL.Commit()
	}
	return t.SQL.Rollback()
}

// Commit commits the transaction. When the COMMIT fails, the transaction is rolled back on its
// connection (the server may have kept it open), and the connection closed if that fails too.
func (t *Tx) Commit() error {
	err := t.end(true)
	if err != nil && !errors.Is(err, sql.ErrTxDone) {
		t.release(true)
	} else {
		t.release(false)
	}
	return err
}

// Rollback rolls the transaction back. When the ROLLBACK fails, the connection is closed: the
// server may still hold the transaction on it.
func (t *Tx) Rollback() error {
	err := t.end(false)
	if err != nil && !errors.Is(err, sql.ErrTxDone) {
		t.discard()
	} else {
		t.release(false)
	}
	return err
}

// release returns the connection to the pool, after rolling back on it when open says the
// transaction may still be open there (closing it instead when that fails).
func (t *Tx) release(open bool) {
	c := t.conn
	if c == nil {
		return
	}
	if open {
		ctx, cancel := context.WithTimeout(context.Background(), EndTimeout)
		_, err := c.ExecContext(ctx, "ROLLBACK")
		cancel()
		if err != nil {
			t.discard()
			return
		}
	}
	t.conn = nil
	_ = c.Close()
}

// discard closes the connection instead of returning it to the pool.
func (t *Tx) discard() {
	c := t.conn
	if c == nil {
		return
	}
	t.conn = nil
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.Close()
}

// Transaction runs fn in a transaction on db as db.Transaction(fn) does — committed when fn returns
// nil, rolled back when it returns an error or panics (the panic goes on) — begun with [BeginGorm].
// When db is already in a transaction (fn then runs in a savepoint) or its pool is neither a *sql.DB
// nor a PrepareStmt session's pool over one, it is db.Transaction(fn) itself.
func Transaction(ctx context.Context, db *gorm.DB, fn func(tx *gorm.DB) error) (err error) {
	sess := db.WithContext(ctx)
	if pool, _ := ownable(sess.Statement.ConnPool); pool == nil {
		return sess.Transaction(fn)
	}
	t, err := BeginGorm(ctx, db)
	if err != nil {
		return err
	}
	panicked := true
	defer func() {
		if panicked || err != nil {
			_ = t.Rollback() // after a failed Commit: ErrTxDone, nothing to do
		}
	}()
	err = fn(t.Gorm)
	panicked = false
	if err != nil {
		return err
	}
	return t.Commit()
}
