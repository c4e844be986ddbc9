package record

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/pgddl"
)

// conn runs a Store's statements on database/sql: on the pool, on a transaction, or on whatever
// gorm.ConnPool a gorm session holds. No gorm callback, logger or reflection is involved.
type conn interface {
	exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
	query(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryOne scans the first row of query into dest, or returns sql.ErrNoRows.
func queryOne(ctx context.Context, c conn, query string, args []any, dest ...any) error {
	rows, err := c.query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Close()
}

func affected(r sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// stmtCache holds the server-side prepared statements of a Store's per-call texts, prepared on the
// pool (database/sql then prepares each once per connection it runs on). A Store uses one on MySQL when
// the DSN does not set interpolateParams: the driver would otherwise prepare, execute and close every
// statement with arguments, two round trips instead of one. It is safe for concurrent use.
//
// A prepare on the pool waits for a free connection, so it is only done by callers that hold none:
// statements outside a transaction prepare on first use ([stmtCache.stmt]); statements in a
// transaction use what is prepared already ([stmtCache.ready]) — a transaction preparing on the pool
// could wait for connections that other transactions, waiting the same way, never give back — and the
// Store prepares the rest before it begins a transaction or creates its table ([stmtCache.prepareAll]).
type stmtCache struct {
	db    *sql.DB
	stmts map[string]*lazyStmt // fixed at creation: read concurrently without a lock
	all   atomic.Bool          // every statement is prepared
}

type lazyStmt struct {
	st atomic.Pointer[sql.Stmt]
	mu sync.Mutex // serialises the first prepare
}

func newStmtCache(db *sql.DB, texts ...string) *stmtCache {
	c := &stmtCache{db: db, stmts: make(map[string]*lazyStmt, len(texts))}
	for _, t := range texts {
		c.stmts[t] = new(lazyStmt)
	}
	return c
}

// stmt returns the prepared statement of query, or nil when query is not one of the cached texts.
func (c *stmtCache) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if c == nil {
		return nil, nil
	}
	l, ok := c.stmts[query]
	if !ok {
		return nil, nil
	}
	if st := l.st.Load(); st != nil {
		return st, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.st.Load(); st != nil {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err // not kept: the next call prepares again (the table may not exist yet)
	}
	l.st.Store(st)
	return st, nil
}

// ready returns the prepared statement of query when it is prepared already, and nil otherwise: it
// never waits for a connection.
func (c *stmtCache) ready(query string) *sql.Stmt {
	if c == nil {
		return nil
	}
	if l, ok := c.stmts[query]; ok {
		return l.st.Load()
	}
	return nil
}

// prepareAll prepares on the pool every statement not prepared yet, until one fails (the table may not
// exist yet; a later call tries again). Call it only while holding no connection of the pool.
func (c *stmtCache) prepareAll(ctx context.Context) {
	if c == nil || c.all.Load() {
		return
	}
	for query := range c.stmts {
		if _, err := c.stmt(ctx, query); err != nil {
			return
		}
	}
	c.all.Store(true)
}

// dbConn runs statements on a pool.
type dbConn struct {
	db *sql.DB
	ps *stmtCache // nil: plain statements
}

func (c dbConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	st, err := c.ps.stmt(ctx, query)
	switch {
	case err != nil:
		return 0, err
	case st != nil:
		return affected(st.ExecContext(ctx, args...))
	}
	return affected(c.db.ExecContext(ctx, query, args...))
}

func (c dbConn) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := c.ps.stmt(ctx, query)
	switch {
	case err != nil:
		return nil, err
	case st != nil:
		return st.QueryContext(ctx, args...)
	}
	return c.db.QueryContext(ctx, query, args...)
}

// txConn runs statements in a database/sql transaction. ps is set only when the transaction belongs to
// the pool the statements were prepared on.
type txConn struct {
	tx *sql.Tx
	ps *stmtCache
}

func (c txConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	if st := c.ps.ready(query); st != nil {
		return affected(c.tx.StmtContext(ctx, st).ExecContext(ctx, args...))
	}
	return affected(c.tx.ExecContext(ctx, query, args...))
}

func (c txConn) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := c.ps.ready(query); st != nil {
		return c.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return c.tx.QueryContext(ctx, query, args...)
}

// poolConn runs statements on a gorm.ConnPool that is neither a *sql.DB nor a *sql.Tx (gorm's prepared
// statement pools, or a plugin's), through its database/sql-style methods: still no gorm callbacks.
type poolConn struct{ p gorm.ConnPool }

func (c poolConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	return affected(c.p.ExecContext(ctx, query, args...))
}

func (c poolConn) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return c.p.QueryContext(ctx, query, args...)
}

// sqlTxOf returns the *sql.Tx under a gorm session's connection pool, or nil.
func sqlTxOf(p gorm.ConnPool) *sql.Tx {
	switch v := p.(type) {
	case *sql.Tx:
		return v
	case *gorm.PreparedStmtTX:
		if tx, ok := v.Tx.(*sql.Tx); ok {
			return tx
		}
	}
	return nil
}

// errConn fails every statement with err (a Store bound to a nil or mismatched transaction).
type errConn struct{ err error }

func (c errConn) exec(context.Context, string, ...any) (int64, error)      { return 0, c.err }
func (c errConn) query(context.Context, string, ...any) (*sql.Rows, error) { return nil, c.err }

// encodingConn is a PostgreSQL Store's conn: its statements run once check found that the sessions
// exchange text in UTF-8 (see pgddl.EncodingCheck).
type encodingConn struct {
	conn
	check *pgddl.EncodingCheck
}

// show runs SHOW setting on c.
func (c encodingConn) show(ctx context.Context, setting string) (string, error) {
	var v string
	err := queryOne(ctx, c.conn, "SHOW "+setting, nil, &v)
	return v, err
}

func (c encodingConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	if err := c.check.Check(ctx, c.show); err != nil {
		return 0, err
	}
	return c.conn.exec(ctx, query, args...)
}

func (c encodingConn) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := c.check.Check(ctx, c.show); err != nil {
		return nil, err
	}
	return c.conn.query(ctx, query, args...)
}
