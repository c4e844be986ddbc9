// Package sqlcount counts what a database/sql pool sends to its server, at the driver: statements,
// server-side prepares, BEGIN, COMMIT and ROLLBACK. Tests and benchmarks use it to assert round-trip
// budgets whatever runs the statements (gorm, database/sql, a third-party library).
package sqlcount

import (
	"context"
	"database/sql/driver"
	"strings"
	"sync/atomic"
)

// Counts are the statements a database/sql pool sent to the server, counted at the driver.
type Counts struct {
	// Statements executed (Exec and Query, on the connection or on a prepared statement); a prepare
	// is not a statement. BEGIN, COMMIT and ROLLBACK are counted apart.
	Statements int64
	// Prepares counts server-side prepares: the mysql driver prepares (and closes) every statement
	// with arguments unless the DSN sets interpolateParams=true or gorm's PrepareStmt caches them.
	Prepares  int64
	Begins    int64
	Commits   int64
	Rollbacks int64
	// InTx counts the Statements run inside a transaction (between BEGIN and its COMMIT or ROLLBACK).
	InTx int64
	// RoundTrips counts what waited for the server's answer: each statement, prepare, BEGIN, COMMIT
	// and ROLLBACK, except that a packet of several statements (a statement followed by "; COMMIT")
	// is one round trip.
	RoundTrips int64
}

// Sub returns c-o.
func (c Counts) Sub(o Counts) Counts {
	return Counts{Statements: c.Statements - o.Statements, Prepares: c.Prepares - o.Prepares, Begins: c.Begins - o.Begins,
		Commits: c.Commits - o.Commits, Rollbacks: c.Rollbacks - o.Rollbacks, InTx: c.InTx - o.InTx, RoundTrips: c.RoundTrips - o.RoundTrips}
}

// Counter wraps a driver.Connector and counts what every connection it opens sends. It sees all
// traffic of the pool, gorm or not (DTM's dtmcli barrier uses database/sql directly), so every
// variant is counted the same way. It is safe for concurrent use.
type Counter struct {
	inner                                             driver.Connector
	stmts, prepares, begins, commits, rollbacks, inTx atomic.Int64
	trips                                             atomic.Int64
}

// New returns a counting connector around inner; open the pool with sql.OpenDB.
func New(inner driver.Connector) *Counter { return &Counter{inner: inner} }

// Counts returns the totals so far.
func (c *Counter) Counts() Counts {
	return Counts{Statements: c.stmts.Load(), Prepares: c.prepares.Load(), Begins: c.begins.Load(), Commits: c.commits.Load(),
		Rollbacks: c.rollbacks.Load(), InTx: c.inTx.Load(), RoundTrips: c.trips.Load()}
}

// Connect implements driver.Connector.
func (c *Counter) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countConn{Conn: conn, c: c}, nil
}

// Driver implements driver.Connector.
func (c *Counter) Driver() driver.Driver { return c.inner.Driver() }

// countConn forwards every optional interface the mysql driver's connection implements.
type countConn struct {
	driver.Conn
	c  *Counter
	tx bool // a transaction is open
}

// statement counts one statement sent in its own round trip.
func (cc *countConn) statement() {
	cc.c.trips.Add(1)
	cc.inStatement()
}

func (cc *countConn) inStatement() {
	cc.c.stmts.Add(1)
	if cc.tx {
		cc.c.inTx.Add(1)
	}
}

// text counts query when it is transaction control sent as text (what a library running a
// transaction on a connection it holds sends: START TRANSACTION, COMMIT, ROLLBACK, or a statement in
// one packet with START TRANSACTION or ROLLBACK before it, COMMIT after it, or both), and reports
// whether it was.
func (cc *countConn) text(query string) bool {
	q := strings.TrimSpace(query)
	switch {
	case strings.EqualFold(q, "START TRANSACTION") || strings.EqualFold(q, "BEGIN"):
		cc.c.trips.Add(1)
		cc.c.begins.Add(1)
		cc.tx = true
		return true
	case strings.EqualFold(q, "COMMIT"):
		cc.c.trips.Add(1)
		cc.c.commits.Add(1)
		cc.tx = false
		return true
	case strings.EqualFold(q, "ROLLBACK"):
		cc.c.trips.Add(1)
		cc.c.rollbacks.Add(1)
		cc.tx = false
		return true
	}
	begin := len(q) > len(beginPrefix) && strings.EqualFold(q[:len(beginPrefix)], beginPrefix)
	rollback := len(q) > len(rollbackPrefix) && strings.EqualFold(q[:len(rollbackPrefix)], rollbackPrefix)
	commit := len(q) > len(commitSuffix) && strings.EqualFold(q[len(q)-len(commitSuffix):], commitSuffix)
	if !begin && !commit && !rollback {
		return false
	}
	cc.c.trips.Add(1)
	if rollback { // the transaction ends first; the statement after it runs outside
		cc.c.rollbacks.Add(1)
		cc.tx = false
	}
	if begin {
		cc.c.begins.Add(1)
		cc.tx = true
	}
	cc.inStatement()
	if commit {
		cc.c.commits.Add(1)
		cc.tx = false
	}
	return true
}

const (
	beginPrefix    = "START TRANSACTION;"
	rollbackPrefix = "ROLLBACK;"
	commitSuffix   = "; COMMIT"
)

func (cc *countConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := cc.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := e.ExecContext(ctx, query, args)
	if err != driver.ErrSkip && !cc.text(query) {
		cc.statement()
	}
	return r, err
}

func (cc *countConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := cc.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := q.QueryContext(ctx, query, args)
	if err != driver.ErrSkip && !cc.text(query) {
		cc.statement()
	}
	return r, err
}

func (cc *countConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var (
		s   driver.Stmt
		err error
	)
	if p, ok := cc.Conn.(driver.ConnPrepareContext); ok {
		s, err = p.PrepareContext(ctx, query)
	} else {
		s, err = cc.Conn.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	cc.c.prepares.Add(1)
	cc.c.trips.Add(1)
	return &countStmt{Stmt: s, cc: cc}, nil
}

func (cc *countConn) Prepare(query string) (driver.Stmt, error) {
	return cc.PrepareContext(context.Background(), query)
}

func (cc *countConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var (
		tx  driver.Tx
		err error
	)
	if b, ok := cc.Conn.(driver.ConnBeginTx); ok {
		tx, err = b.BeginTx(ctx, opts)
	} else {
		tx, err = cc.Conn.Begin() //nolint:staticcheck // fallback for old drivers
	}
	if err != nil {
		return nil, err
	}
	cc.c.begins.Add(1)
	cc.c.trips.Add(1)
	cc.tx = true
	return &countTx{Tx: tx, cc: cc}, nil
}

func (cc *countConn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := cc.Conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (cc *countConn) Ping(ctx context.Context) error {
	if p, ok := cc.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (cc *countConn) ResetSession(ctx context.Context) error {
	if r, ok := cc.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (cc *countConn) IsValid() bool {
	if v, ok := cc.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

type countStmt struct {
	driver.Stmt
	cc *countConn
}

func (s *countStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.cc.statement()
	if e, ok := s.Stmt.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	return nil, driver.ErrSkip
}

func (s *countStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.cc.statement()
	if q, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	return nil, driver.ErrSkip
}

type countTx struct {
	driver.Tx
	cc *countConn
}

func (t *countTx) Commit() error {
	t.cc.c.commits.Add(1)
	t.cc.c.trips.Add(1)
	t.cc.tx = false
	return t.Tx.Commit()
}

func (t *countTx) Rollback() error {
	t.cc.c.rollbacks.Add(1)
	t.cc.c.trips.Add(1)
	t.cc.tx = false
	return t.Tx.Rollback()
}
