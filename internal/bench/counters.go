package bench

import (
	"context"
	"database/sql/driver"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
)

// SQLCounts are the statements a database/sql pool sent to the server, counted at the driver.
type SQLCounts struct {
	// Statements executed (Exec and Query, on the connection or on a prepared statement); a prepare
	// is not a statement. BEGIN, COMMIT and ROLLBACK are counted apart.
	Statements int64
	// Prepares counts server-side prepares: the mysql driver prepares (and closes) every statement
	// with arguments unless the DSN sets interpolateParams=true or gorm's PrepareStmt caches them.
	Prepares  int64
	Begins    int64
	Commits   int64
	Rollbacks int64
}

// Sub returns c-o.
func (c SQLCounts) Sub(o SQLCounts) SQLCounts {
	return SQLCounts{c.Statements - o.Statements, c.Prepares - o.Prepares, c.Begins - o.Begins, c.Commits - o.Commits, c.Rollbacks - o.Rollbacks}
}

// SQLCounter wraps a driver.Connector and counts what every connection it opens sends. It sees all
// traffic of the pool, gorm or not (DTM's dtmcli barrier uses database/sql directly), so every
// variant is counted the same way. It is safe for concurrent use.
type SQLCounter struct {
	inner                                       driver.Connector
	stmts, prepares, begins, commits, rollbacks atomic.Int64
}

// NewSQLCounter returns a counting connector around inner; open the pool with sql.OpenDB.
func NewSQLCounter(inner driver.Connector) *SQLCounter { return &SQLCounter{inner: inner} }

// Counts returns the totals so far.
func (c *SQLCounter) Counts() SQLCounts {
	return SQLCounts{c.stmts.Load(), c.prepares.Load(), c.begins.Load(), c.commits.Load(), c.rollbacks.Load()}
}

// Connect implements driver.Connector.
func (c *SQLCounter) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countConn{Conn: conn, c: c}, nil
}

// Driver implements driver.Connector.
func (c *SQLCounter) Driver() driver.Driver { return c.inner.Driver() }

// countConn forwards every optional interface the mysql driver's connection implements.
type countConn struct {
	driver.Conn
	c *SQLCounter
}

func (cc *countConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := cc.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := e.ExecContext(ctx, query, args)
	if err != driver.ErrSkip {
		cc.c.stmts.Add(1)
	}
	return r, err
}

func (cc *countConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := cc.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := q.QueryContext(ctx, query, args)
	if err != driver.ErrSkip {
		cc.c.stmts.Add(1)
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
	return &countStmt{Stmt: s, c: cc.c}, nil
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
	return &countTx{Tx: tx, c: cc.c}, nil
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
	c *SQLCounter
}

func (s *countStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.stmts.Add(1)
	if e, ok := s.Stmt.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	return nil, driver.ErrSkip
}

func (s *countStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.stmts.Add(1)
	if q, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	return nil, driver.ErrSkip
}

type countTx struct {
	driver.Tx
	c *SQLCounter
}

func (t *countTx) Commit() error   { t.c.commits.Add(1); return t.Tx.Commit() }
func (t *countTx) Rollback() error { t.c.rollbacks.Add(1); return t.Tx.Rollback() }

// RedisCounts are the commands a go-redis client sent.
type RedisCounts struct {
	// Commands, each command of a pipeline counted.
	Commands int64
	// RoundTrips: one per command outside pipelines, one per pipeline.
	RoundTrips int64
	// Evals counts EVAL commands: a script sent in full, because the server did not have it cached
	// (EVALSHA's NOSCRIPT fallback) or the caller did not use EVALSHA.
	Evals int64
}

// Sub returns c-o.
func (c RedisCounts) Sub(o RedisCounts) RedisCounts {
	return RedisCounts{c.Commands - o.Commands, c.RoundTrips - o.RoundTrips, c.Evals - o.Evals}
}

// RedisCounter is a go-redis hook counting commands and round trips (client.AddHook). It is safe for
// concurrent use.
type RedisCounter struct{ cmds, trips, evals atomic.Int64 }

// Counts returns the totals so far.
func (c *RedisCounter) Counts() RedisCounts {
	return RedisCounts{c.cmds.Load(), c.trips.Load(), c.evals.Load()}
}

// DialHook implements redis.Hook.
func (c *RedisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *RedisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		c.trips.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *RedisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		c.trips.Add(1)
		return next(ctx, cmds)
	}
}

func (c *RedisCounter) count(cmd redis.Cmder) {
	c.cmds.Add(1)
	if n := cmd.Name(); len(n) == 4 && strings.EqualFold(n, "eval") {
		c.evals.Add(1)
	}
}

// GormCounter counts the statements gorm runs on a *gorm.DB, by a callback after each processor:
// it sees what the record Store and the business statements send through gorm, not DTM's
// database/sql statements. Install it with [CountGorm].
type GormCounter struct{ n atomic.Int64 }

// Statements returns the total so far.
func (c *GormCounter) Statements() int64 { return c.n.Load() }

// CountGorm registers a GormCounter's callbacks on db and returns it.
func CountGorm(db *gorm.DB) (*GormCounter, error) {
	c := new(GormCounter)
	inc := func(*gorm.DB) { c.n.Add(1) }
	const name = "idembench:count"
	cb := db.Callback()
	for _, err := range []error{
		cb.Create().After("gorm:create").Register(name, inc),
		cb.Query().After("gorm:query").Register(name, inc),
		cb.Update().After("gorm:update").Register(name, inc),
		cb.Delete().After("gorm:delete").Register(name, inc),
		cb.Raw().After("gorm:raw").Register(name, inc), // db.Exec
		cb.Row().After("gorm:row").Register(name, inc), // db.Raw(...).Row() and .Rows()
	} {
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}
