package record

import (
	"context"
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idemkit/internal/ownedtx"
)

// flakyConn fails the first n statements with err.
type flakyConn struct {
	conn
	n     int
	err   error
	calls int
}

func (f *flakyConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	f.calls++
	if f.calls <= f.n {
		return 0, f.err
	}
	return 1, nil
}

func TestDeadlockVictimIsRetried(t *testing.T) {
	for _, tc := range []struct {
		dialect string
		err     error
	}{
		{dialectMySQL, &mysql.MySQLError{Number: ownedtx.MySQLDeadlock, Message: "Deadlock found"}},
		{dialectPostgres, &pgconn.PgError{Code: ownedtx.PostgresDeadlock}},
		// A REPEATABLE READ or SERIALIZABLE statement that waited for a row committed after its snapshot.
		{dialectPostgres, &pgconn.PgError{Code: ownedtx.PostgresSerialization}},
	} {
		s := &Store{q: &queries{dialect: tc.dialect}}
		f := &flakyConn{n: 2, err: tc.err}
		s.c = f
		if n, err := s.exec(context.Background(), "UPDATE"); err != nil || n != 1 || f.calls != 3 {
			t.Fatalf("%s: %d, %v after %d calls; want success on the third", tc.dialect, n, err, f.calls)
		}
		// In a caller's transaction the deadlock rolled everything back: no retry.
		s.inTx = true
		f = &flakyConn{n: 1, err: tc.err}
		s.c = f
		if _, err := s.exec(context.Background(), "UPDATE"); !errors.Is(err, tc.err) || f.calls != 1 {
			t.Fatalf("%s in a transaction: %v after %d calls", tc.dialect, err, f.calls)
		}
		// Bounded: a deadlock every time gives up.
		s.inTx = false
		f = &flakyConn{n: 100, err: tc.err}
		s.c = f
		if _, err := s.exec(context.Background(), "UPDATE"); err == nil || f.calls != deadlockRetries+1 {
			t.Fatalf("%s: persistent deadlock: %v after %d calls", tc.dialect, err, f.calls)
		}
	}
	// Other errors are not retried.
	s := &Store{q: &queries{dialect: dialectMySQL}}
	f := &flakyConn{n: 1, err: &mysql.MySQLError{Number: 1146}}
	s.c = f
	if _, err := s.exec(context.Background(), "UPDATE"); err == nil || f.calls != 1 {
		t.Fatalf("non-deadlock error retried: %d calls", f.calls)
	}
}
