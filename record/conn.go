package record

import (
	"context"
	"database/sql"

	"gorm.io/gorm"
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

type gormConn struct{ db *gorm.DB }

func (c gormConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	r := c.db.WithContext(ctx).Exec(query, args...)
	return r.RowsAffected, r.Error
}

func (c gormConn) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return c.db.WithContext(ctx).Raw(query, args...).Rows()
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
