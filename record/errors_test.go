package record

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

func insertArgs(rec *idemkit.Record) []any {
	return []any{rec.Scope, rec.Key, string(rec.Status), rec.Fence, rec.Owner, rec.Fingerprint, rec.GID, rec.BranchID,
		response(rec.Response), rec.Error, millis(rec.LeaseUntil), millis(rec.ExpiresAt), millis(rec.CreatedAt), millis(rec.UpdatedAt)}
}

// TestUniqueViolationRecognised runs a plain INSERT (no conflict clause) twice and checks that each
// driver's duplicate-key error becomes ErrExists, with gorm's TranslateError off and on.
func TestUniqueViolationRecognised(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		for _, translate := range []bool{false, true} {
			db := b.db(t, &gorm.Config{Logger: logger.Discard, TranslateError: translate})
			s := newTable(t, db)
			rec := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusProcessing, Fence: 1, Owner: "o"}
			_, err := s.c.exec(ctxb, s.q.plainInsert, insertArgs(rec)...)
			must(t, err)
			_, err = s.c.exec(ctxb, s.q.plainInsert, insertArgs(rec)...)
			if err == nil {
				t.Fatal("duplicate plain INSERT succeeded")
			}
			if !translate { // the driver's own error reaches interpretError
				want, code := map[string]string{dialectMySQL: "1062", dialectPostgres: "23505", dialectSQLite: "1555"}[s.Dialect()], "" // SQLite: SQLITE_CONSTRAINT_PRIMARYKEY
				var (
					my   *mysql.MySQLError
					pg   interface{ SQLState() string }
					lite interface{ Code() int }
				)
				switch {
				case errors.As(err, &my):
					code = strconv.Itoa(int(my.Number))
				case errors.As(err, &pg):
					code = pg.SQLState()
				case errors.As(err, &lite):
					code = strconv.Itoa(lite.Code())
				}
				if code != want {
					t.Fatalf("driver error %T %v: code %q, want %s", err, err, code, want)
				}
			}
			if got := s.q.interpretError("inserting into", err); got != idemkit.ErrExists {
				t.Fatalf("TranslateError %v: interpretError(%v) = %v, want ErrExists", translate, err, got)
			}
		}
	})
}

func TestBackendErrorsAreWrapped(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		db := b.db(t, nil)
		table := testsvc.Name("t_missing_")
		s, err := New(db, &Options{Table: table})
		must(t, err)
		rec := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusProcessing, Fence: 1, Owner: "o"}
		err = s.Insert(ctxb, rec)
		if err == nil || errors.Is(err, idemkit.ErrExists) || !strings.Contains(err.Error(), "record: inserting into "+table) {
			t.Fatalf("Insert into a missing table: %v", err)
		}
		if _, err := s.Get(ctxb, "s", "k"); err == nil || errors.Is(err, idemkit.ErrNotFound) || !strings.Contains(err.Error(), "record: reading "+table) {
			t.Fatalf("Get from a missing table: %v", err)
		}
		if err := s.Update(ctxb, rec, rec.Version()); err == nil || errors.Is(err, idemkit.ErrFenced) {
			t.Fatalf("Update of a missing table: %v", err)
		}
		if err := s.Delete(ctxb, "s", "k", rec.Version()); err == nil || errors.Is(err, idemkit.ErrFenced) {
			t.Fatalf("Delete from a missing table: %v", err)
		}
		for name, f := range map[string]func() (int, error){
			"DeleteExpired": func() (int, error) { return s.DeleteExpired(ctxb, time.Now(), 10) },
			"RecoverStale":  func() (int, error) { return s.RecoverStale(ctxb, time.Now(), 10) },
			"Pending": func() (int, error) {
				r, err := s.Pending(ctxb, idemkit.PendingQuery{Scopes: []string{"s"}, Now: time.Now(), Limit: 10})
				return len(r), err
			},
		} {
			if _, err := f(); err == nil || !strings.Contains(err.Error(), table) {
				t.Fatalf("%s on a missing table: %v", name, err)
			}
		}
	})
}

// TestInsertDoesNotAbortTransaction: a duplicate Insert inside a transaction leaves it usable, even on
// PostgreSQL, where a failed statement aborts the whole transaction.
func TestInsertDoesNotAbortTransaction(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, db := setup(t, b)
		rec := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusProcessing, Fence: 1, Owner: "o"}
		must(t, s.Insert(ctxb, rec))
		must(t, db.Transaction(func(tx *gorm.DB) error {
			st := s.WithTx(tx)
			if err := st.Insert(ctxb, rec); err != idemkit.ErrExists {
				t.Fatalf("duplicate Insert in a transaction = %v", err)
			}
			got, err := st.Get(ctxb, "s", "k")
			if err != nil {
				return err
			}
			next := *got
			next.Status, next.Fence, next.Owner = idemkit.StatusProcessing, 2, "o2"
			return st.Update(ctxb, &next, got.Version())
		}))
		got, err := s.Get(ctxb, "s", "k")
		must(t, err)
		if got.Fence != 2 {
			t.Fatalf("fence %d after the transaction, want 2", got.Fence)
		}
	})
}

// TestMySQLClientFoundRowsRejected: with clientFoundRows=true in the DSN, ON DUPLICATE KEY UPDATE
// reports a duplicate as one row, like an insert; New refuses such a database rather than miss duplicates.
func TestMySQLClientFoundRowsRejected(t *testing.T) {
	for _, dsn := range []string{"?clientFoundRows=true", "?timeout=3s&clientFoundRows=true"} {
		db, err := gorm.Open(gormmysql.New(gormmysql.Config{DSN: "root:@tcp(127.0.0.1:3306)/x" + dsn, SkipInitializeWithVersion: true}),
			&gorm.Config{Logger: logger.Discard, DisableAutomaticPing: true})
		must(t, err)
		if _, err := New(db, nil); err == nil || !strings.Contains(err.Error(), "clientFoundRows") {
			t.Fatalf("New with %s: %v, want an error about clientFoundRows", dsn, err)
		}
	}
	// The flag's effect, shown on the real server: a duplicate reports one affected row.
	testsvc.MySQL(t, nil) // creates the database or skips
	db, err := gorm.Open(gormmysql.Open(testsvc.MySQLDSN()+testsvc.Database+"?timeout=3s&clientFoundRows=true"),
		&gorm.Config{Logger: logger.Discard})
	must(t, err)
	sqlDB, err := db.DB()
	must(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	plain := newTable(t, testsvc.MySQL(t, nil))

	// A transaction of such a connection is refused the same way by WithTx, before anything runs
	// (issue 11, item 5): DoTx would otherwise take a duplicate for a new key and run it again.
	g, err := idemkit.New(plain, nil)
	must(t, err)
	ran := 0
	_ = db.Transaction(func(tx *gorm.DB) error {
		_, err := g.DoTx(ctxb, plain.WithTx(tx), idemkit.Call{Scope: "s", Key: "cfr"}, func(context.Context) ([]byte, error) {
			ran++
			return nil, nil
		})
		if err == nil || !strings.Contains(err.Error(), "clientFoundRows") {
			t.Errorf("DoTx through WithTx on a clientFoundRows connection: %v, want an error about clientFoundRows", err)
		}
		return err
	})
	if ran != 0 {
		t.Fatal("the function ran on a connection whose duplicates cannot be detected")
	}
	rec := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusProcessing, Fence: 1, Owner: "o"}
	must(t, plain.Insert(ctxb, rec))
	r := db.Exec(plain.q.insert, insertArgs(rec)...)
	must(t, r.Error)
	if r.RowsAffected != 1 {
		t.Fatalf("duplicate under clientFoundRows affected %d rows; the reason for refusing it is gone", r.RowsAffected)
	}
}

// TestNewRefusesFailedOpen: the *gorm.DB a failed gorm.Open returns beside its error is refused with a
// clear error instead of a panic on first use (issue 11, item 17).
func TestNewRefusesFailedOpen(t *testing.T) {
	for name, d := range map[string]gorm.Dialector{
		"MySQL, no such database":  gormmysql.Open(testsvc.MySQLDSN() + "no_such_database_idemkit?timeout=3s"),
		"MySQL, nothing listening": gormmysql.Open("root:@tcp(127.0.0.1:1)/x?timeout=1s"),
	} {
		db, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard})
		if err == nil {
			t.Fatalf("%s: gorm.Open succeeded", name)
		}
		s, err := New(db, nil)
		if err == nil || !strings.Contains(err.Error(), "gorm.Open failed") {
			t.Fatalf("%s: New = %v, %v; want an error naming the failed gorm.Open", name, s, err)
		}
	}
}

// TestIsConflict: the errors a transaction rolled back on a write conflict comes with — InnoDB's
// deadlock, Galera's certification failure (the same code, another message), PostgreSQL's deadlock
// and serialization failure — are conflicts, through any wrapping; nothing else is.
func TestIsConflict(t *testing.T) {
	galera := &mysql.MySQLError{Number: 1213, Message: "WSREP detected deadlock/conflict and aborted the transaction. Try restarting the transaction"}
	innodb := &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction"}
	q := buildQueries(dialectMySQL, "", "t")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", errors.New("boom"), false},
		{"InnoDB deadlock", innodb, true},
		{"Galera certification failure", galera, true},
		{"Galera wrapped by interpretError and the Guard", fmt.Errorf("%w: claiming record: %w", idemkit.ErrStoreUnavailable, q.interpretError("inserting into", galera)), true},
		{"ErrConflict", fmt.Errorf("x: %w", ErrConflict), true},
		{"PostgreSQL deadlock", &pgconn.PgError{Code: "40P01"}, true},
		{"PostgreSQL serialization failure", &pgconn.PgError{Code: "40001"}, true},
		{"duplicate key", &mysql.MySQLError{Number: 1062}, false},
		{"PostgreSQL unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"Galera node not ready", &mysql.MySQLError{Number: 1047, Message: "WSREP has not yet prepared node for application use"}, false},
		{"lock wait timeout", &mysql.MySQLError{Number: 1205}, false},
	} {
		if got := IsConflict(tc.err); got != tc.want {
			t.Errorf("%s: IsConflict(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}

	// interpretError keeps the driver's error and says what was being done.
	err := q.interpretError("inserting into", galera)
	var my *mysql.MySQLError
	if !errors.Is(err, ErrConflict) || errors.Is(err, idemkit.ErrExists) || !errors.As(err, &my) || my.Number != 1213 ||
		!strings.Contains(err.Error(), "record: inserting into t") {
		t.Errorf("interpretError(Galera conflict) = %v", err)
	}
	err = q.interpretError("reading", &mysql.MySQLError{Number: 1047, Message: "WSREP has not yet prepared node for application use"})
	if errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "Galera node does not accept queries") {
		t.Errorf("interpretError(Galera node not ready) = %v", err)
	}
	// PostgreSQL's deadlock is a conflict; a unique violation still means ErrExists.
	pq := buildQueries(dialectPostgres, "", "t")
	if err := pq.interpretError("updating", &pgconn.PgError{Code: "40P01"}); !errors.Is(err, ErrConflict) {
		t.Errorf("interpretError(PostgreSQL deadlock) = %v", err)
	}
	if err := pq.interpretError("inserting into", &pgconn.PgError{Code: "23505"}); err != idemkit.ErrExists {
		t.Errorf("interpretError(PostgreSQL unique violation) = %v", err)
	}
}

// TestConflictInCallerTransaction makes the database pick a deadlock victim between two caller
// transactions that insert the same two keys in opposite orders: the victim's Insert fails with an
// error wrapping ErrConflict (its transaction is gone: never ErrExists, which would let the caller
// go on), and the survivor commits both of its records.
func TestConflictInCallerTransaction(t *testing.T) {
	for _, b := range backends[:2] { // MariaDB and PostgreSQL: SQLite has no row locks
		t.Run(b.name, func(t *testing.T) {
			s, db := setup(t, b)
			rec := func(key string) *idemkit.Record {
				return &idemkit.Record{Scope: "s", Key: key, Status: idemkit.StatusProcessing, Fence: 1, Owner: "o"}
			}
			firstDone := make(chan struct{}, 2)
			errs := make(chan error, 2)
			run := func(a, b string) {
				errs <- db.Transaction(func(tx *gorm.DB) error {
					st := s.WithTx(tx)
					if err := st.Insert(ctxb, rec(a)); err != nil {
						return err
					}
					firstDone <- struct{}{}
					// Wait until the other transaction holds its first key, so each waits on the other.
					deadline := time.Now().Add(10 * time.Second)
					for len(firstDone) < 2 && time.Now().Before(deadline) {
						time.Sleep(5 * time.Millisecond)
					}
					return st.Insert(ctxb, rec(b))
				})
			}
			go run("k1", "k2")
			go run("k2", "k1")
			var conflicts, ok int
			for range 2 {
				switch err := <-errs; {
				case err == nil:
					ok++
				case errors.Is(err, ErrConflict) && IsConflict(err) && !errors.Is(err, idemkit.ErrExists):
					conflicts++
				default:
					t.Errorf("transaction: %v, want nil or an error wrapping ErrConflict", err)
				}
			}
			if conflicts != 1 || ok != 1 {
				t.Fatalf("%d transactions committed, %d rolled back on a conflict; want 1 and 1", ok, conflicts)
			}
			for _, k := range []string{"k1", "k2"} {
				if _, err := s.Get(ctxb, "s", k); err != nil {
					t.Errorf("record %s after the survivor committed: %v", k, err)
				}
			}
		})
	}
}
