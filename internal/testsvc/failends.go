package testsvc

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// FailEndsMySQL opens the test MySQL database through a FailEnds, on a pool of one connection (every
// statement after a failed end gets the same connection, if it went back to the pool), as a
// database/sql pool and a gorm.DB on it, closed when t ends; the test fails or skips as MySQL does
// when the service is missing.
func FailEndsMySQL(t testing.TB) (*FailEnds, *gorm.DB, *sql.DB) {
	t.Helper()
	MySQL(t, nil) // the test database exists, or the test fails/skips
	mc, err := mysql.ParseDSN(MySQLDSN() + Database + "?timeout=3s")
	if err != nil {
		t.Fatal(err)
	}
	inner, err := mysql.NewConnector(mc)
	if err != nil {
		t.Fatal(err)
	}
	fc := &FailEnds{Inner: inner}
	sqlDB := sql.OpenDB(fc)
	sqlDB.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = sqlDB.Close() })
	db, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: sqlDB, DSNConfig: mc}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return fc, db, sqlDB
}

// FailEnds is a connector whose transactions, while FailCommit or FailRollback is set, answer their
// Commit or Rollback as a Galera node that lost its primary component does (MySQL error 1047) and
// leave the transaction open on the server, as that node does. It wraps a MySQL connector.
type FailEnds struct {
	Inner                    driver.Connector
	FailCommit, FailRollback atomic.Bool
}

// ErrNoPrimary is the error FailEnds's Commit and Rollback return.
var ErrNoPrimary = &mysql.MySQLError{Number: 1047, SQLState: [5]byte{'0', '8', 'S', '0', '1'}, Message: "WSREP has not yet prepared node for application use"}

// Connect implements driver.Connector.
func (f *FailEnds) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := f.Inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &failEndsConn{Conn: c, f: f}, nil
}

// Driver implements driver.Connector.
func (f *FailEnds) Driver() driver.Driver { return f.Inner.Driver() }

// failEndsConn is the MySQL driver's connection with its transactions wrapped; every other method
// is the driver's.
type failEndsConn struct {
	driver.Conn
	f *FailEnds
}

func (c *failEndsConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &failEndsTx{Tx: tx, f: c.f}, nil
}

func (c *failEndsConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *failEndsConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *failEndsConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

func (c *failEndsConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

func (c *failEndsConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *failEndsConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

type failEndsTx struct {
	driver.Tx
	f *FailEnds
}

func (t *failEndsTx) Commit() error {
	if t.f.FailCommit.Load() {
		return ErrNoPrimary // COMMIT refused, the transaction still open
	}
	return t.Tx.Commit()
}

func (t *failEndsTx) Rollback() error {
	if t.f.FailRollback.Load() {
		return ErrNoPrimary // ROLLBACK refused, the transaction still open
	}
	return t.Tx.Rollback()
}
