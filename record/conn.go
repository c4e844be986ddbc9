package record

import (
	"context"
	"database/sql"
	"errors"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// conn runs a Store's statements: through gorm (so its callbacks, logger and prepared-statement mode
// see them) or on a caller's *sql.Tx. Single-row reads go through query too (see queryOne): gorm's
// PrepareStmt mode loses a failed prepare's error in QueryRowContext and returns a *sql.Row that panics
// on Scan (gorm v1.31.2, prepare_stmt.go).
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

// gormConn runs statements through gorm's Raw and Row callback chains, as db.Exec and
// db.Raw(...).Rows() do, so callbacks, the logger and PrepareStmt mode see every statement. When
// direct is set (MySQL and SQLite, whose placeholder is gorm's '?'), it builds the statement itself
// instead of calling Exec/Raw: those clone the session's Statement, then make another one, and copy
// the SQL text into it byte by byte through clause.Expr.Build, re-appending every argument — about
// twenty allocations per statement for texts that need no rewriting and arguments (strings, int64,
// []byte, nil) that need no conversion. The Statement built here is the one gorm's getInstance makes
// for a fresh session. PostgreSQL texts need gorm's $n rewriting and go through Exec/Raw.
type gormConn struct {
	db     *gorm.DB
	direct bool
}

func newGormConn(db *gorm.DB) gormConn {
	return gormConn{db: db, direct: db.Dialector.Name() != dialectPostgres}
}

// statement returns a fresh session of c.db carrying query and args, like db.Raw(query, args...).
func (c gormConn) statement(ctx context.Context, query string, args []any) *gorm.DB {
	db := c.db
	tx := &gorm.DB{Config: db.Config, Error: db.Error}
	tx.Statement = &gorm.Statement{
		DB:        tx,
		ConnPool:  db.Statement.ConnPool,
		Context:   ctx,
		Clauses:   map[string]clause.Clause{},
		Vars:      args,
		SkipHooks: db.Statement.SkipHooks,
	}
	if db.Config.PropagateUnscoped {
		tx.Statement.Unscoped = db.Statement.Unscoped
	}
	tx.Statement.SQL.Grow(len(query))
	tx.Statement.SQL.WriteString(query)
	return tx
}

func (c gormConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	if !c.direct {
		r := c.db.WithContext(ctx).Exec(query, args...)
		return r.RowsAffected, r.Error
	}
	tx := c.statement(ctx, query, args)
	tx = tx.Callback().Raw().Execute(tx)
	return tx.RowsAffected, tx.Error
}

func (c gormConn) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if !c.direct {
		return c.db.WithContext(ctx).Raw(query, args...).Rows()
	}
	tx := c.statement(ctx, query, args)
	tx.Statement.Settings.Store("rows", true) // what db.Rows() sets: the row callback then returns *sql.Rows
	tx = tx.Callback().Row().Execute(tx)
	rows, ok := tx.Statement.Dest.(*sql.Rows)
	if !ok && tx.Error == nil {
		return nil, errors.New("record: gorm's row callback returned no rows")
	}
	return rows, tx.Error
}

type sqlTxConn struct{ tx *sql.Tx }

func (c sqlTxConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := c.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c sqlTxConn) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return c.tx.QueryContext(ctx, query, args...)
}

// errConn fails every statement with err (a Store bound to a nil or mismatched transaction).
type errConn struct{ err error }

func (c errConn) exec(context.Context, string, ...any) (int64, error)      { return 0, c.err }
func (c errConn) query(context.Context, string, ...any) (*sql.Rows, error) { return nil, c.err }
