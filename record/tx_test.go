package record

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/memory"
)

// bizTable creates a business table (id, k, fence), dropped when t ends, and returns its name.
func bizTable(t testing.TB, db *gorm.DB) string {
	t.Helper()
	name := testsvc.Name("t_biz_")
	id := map[string]string{
		dialectMySQL:    "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY",
		dialectPostgres: "BIGSERIAL PRIMARY KEY",
		dialectSQLite:   "INTEGER PRIMARY KEY",
	}[db.Dialector.Name()]
	testsvc.DropTable(t, db, name)
	must(t, db.Exec("CREATE TABLE "+name+" (id "+id+", k VARCHAR(128) NOT NULL, fence BIGINT NOT NULL)").Error)
	return name
}

func bizRows(t testing.TB, db *gorm.DB, biz, key string) int {
	t.Helper()
	var n int
	must(t, db.Raw("SELECT count(*) FROM "+biz+" WHERE k = ?", key).Row().Scan(&n))
	return n
}

// txFixture is a Store, a Guard without Locker and a business table on one database.
type txFixture struct {
	db    *gorm.DB
	store *Store
	guard *idemkit.Guard
	biz   string
	runs  atomic.Int32
	hold  time.Duration // how long the function holds its transaction open after its insert
}

func newTxFixture(t *testing.T, b backend, cfg *gorm.Config) *txFixture {
	t.Helper()
	return newTxFixtureOn(t, b.db(t, cfg))
}

func newTxFixtureOn(t *testing.T, db *gorm.DB) *txFixture {
	t.Helper()
	s := newTable(t, db)
	g, err := idemkit.New(s, nil)
	must(t, err)
	return &txFixture{db: db, store: s, guard: g, biz: bizTable(t, db)}
}

// doGorm runs a guarded business insert of key in db.Transaction; fail decides what the function does
// after its insert: nil returns a result, an error returns it, a string panics with it.
func (f *txFixture) doGorm(key string, fail any) (res idemkit.Result, err error) {
	err = f.db.Transaction(func(tx *gorm.DB) error {
		var derr error
		res, derr = f.guard.DoTx(ctxb, f.store.WithTx(tx), idemkit.Call{Scope: "tx", Key: key}, func(ctx context.Context) ([]byte, error) {
			f.runs.Add(1)
			fence, _ := idemkit.FenceFromContext(ctx)
			if err := tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, ?)", key, fence).Error; err != nil {
				return nil, err
			}
			time.Sleep(f.hold)
			return f.outcome(key, fail)
		})
		return derr
	})
	return res, err
}

// doSQL is doGorm on a database/sql transaction; it rolls back on error and on panic (re-panicking).
func (f *txFixture) doSQL(key string, fail any) (res idemkit.Result, err error) {
	sqlDB, err := f.db.DB()
	if err != nil {
		return res, err
	}
	tx, err := sqlDB.BeginTx(ctxb, nil)
	if err != nil {
		return res, err
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
	}()
	insert := "INSERT INTO " + f.biz + " (k, fence) VALUES (?, ?)"
	if f.store.Dialect() == dialectPostgres {
		insert = "INSERT INTO " + f.biz + " (k, fence) VALUES ($1, $2)"
	}
	res, err = f.guard.DoTx(ctxb, f.store.WithSQLTx(tx), idemkit.Call{Scope: "tx", Key: key}, func(ctx context.Context) ([]byte, error) {
		f.runs.Add(1)
		fence, _ := idemkit.FenceFromContext(ctx)
		if _, err := tx.ExecContext(ctx, insert, key, fence); err != nil {
			return nil, err
		}
		return f.outcome(key, fail)
	})
	if err != nil {
		return res, errors.Join(err, tx.Rollback())
	}
	return res, tx.Commit()
}

func (f *txFixture) outcome(key string, fail any) ([]byte, error) {
	switch v := fail.(type) {
	case error:
		return nil, v
	case string:
		panic(v)
	}
	return []byte("paid " + key), nil
}

func recovered(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

func TestTxMode(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		for _, mode := range []string{"gorm", "gorm+PrepareStmt", "sql.Tx"} {
			t.Run(mode, func(t *testing.T) {
				var cfg *gorm.Config
				if mode == "gorm+PrepareStmt" {
					cfg = &gorm.Config{PrepareStmt: true, Logger: logger.Discard}
				}
				f := newTxFixture(t, b, cfg)
				do := f.doGorm
				if mode == "sql.Tx" {
					do = f.doSQL
				}
				wantState := func(key string, rows int, status idemkit.Status) {
					t.Helper()
					if n := bizRows(t, f.db, f.biz, key); n != rows {
						t.Fatalf("%s: %d business rows, want %d", key, n, rows)
					}
					rec, err := f.store.Get(ctxb, "tx", key)
					switch {
					case status == "" && !errors.Is(err, idemkit.ErrNotFound):
						t.Fatalf("%s: record %+v, %v; want none", key, rec, err)
					case status != "" && (err != nil || rec.Status != status):
						t.Fatalf("%s: record %+v, %v; want %s", key, rec, err, status)
					}
				}

				t.Run("Commit", func(t *testing.T) {
					f.runs.Store(0)
					res, err := do("commit", nil)
					must(t, err)
					if res.Replayed || string(res.Value) != "paid commit" {
						t.Fatalf("first call: %+v", res)
					}
					wantState("commit", 1, idemkit.StatusSucceeded)
					res, err = do("commit", nil)
					must(t, err)
					if !res.Replayed || string(res.Value) != "paid commit" || f.runs.Load() != 1 {
						t.Fatalf("retry: %+v after %d runs; want a replay after 1", res, f.runs.Load())
					}
					wantState("commit", 1, idemkit.StatusSucceeded)
				})

				t.Run("ErrorRollsBack", func(t *testing.T) {
					f.runs.Store(0)
					boom := errors.New("boom")
					if _, err := do("error", boom); !errors.Is(err, boom) {
						t.Fatalf("err = %v, want boom", err)
					}
					wantState("error", 0, "")
					res, err := do("error", nil)
					must(t, err)
					if res.Replayed || f.runs.Load() != 2 {
						t.Fatalf("retry: %+v after %d runs; want a fresh run (2 runs)", res, f.runs.Load())
					}
					wantState("error", 1, idemkit.StatusSucceeded)
				})

				t.Run("PanicRollsBack", func(t *testing.T) {
					f.runs.Store(0)
					if p := recovered(func() { _, _ = do("panic", "kaboom") }); p != "kaboom" {
						t.Fatalf("recovered %v, want the function's panic", p)
					}
					wantState("panic", 0, "")
					res, err := do("panic", nil)
					must(t, err)
					if res.Replayed || f.runs.Load() != 2 {
						t.Fatalf("retry: %+v after %d runs; want a fresh run", res, f.runs.Load())
					}
					wantState("panic", 1, idemkit.StatusSucceeded)
					if _, err := do("panic", nil); err != nil || f.runs.Load() != 2 {
						t.Fatalf("second retry: %v after %d runs; want a replay", err, f.runs.Load())
					}
				})
			})
		}
	})
}

// TestTxModeConcurrentSameKey: without a Locker, caller-owned transactions (DoTx) on the same key
// serialise on the record's primary key; exactly one business row results and the others replay (after
// rolling back, with ErrRollbackReplayed, when they ran) or see ErrInFlight.
func TestTxModeConcurrentSameKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		f := newTxFixture(t, b, nil)
		if b.name == "SQLite" {
			// DoTx reads before it writes: SQLite transactions must take the write lock at BEGIN
			// (_txlock=immediate) for concurrent ones to queue rather than fail with SQLITE_BUSY.
			f = newTxFixtureOn(t, immediateSQLite(t))
		}
		f.hold = 50 * time.Millisecond // widen the window: the second transaction reaches its insert meanwhile
		for round := range 3 {
			key := fmt.Sprintf("race-%d", round)
			var (
				wg                      sync.WaitGroup
				fresh, replayed, flight atomic.Int32
				start                   = make(chan struct{})
			)
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					res, err := f.doGorm(key, nil)
					switch {
					case err == nil && res.Replayed:
						replayed.Add(1)
					case errors.Is(err, idemkit.ErrRollbackReplayed) && res.Replayed && string(res.Value) == "paid "+key:
						// Both read the key as new and ran; this one's INSERT waited for the other's
						// commit, found its record, and its transaction rolled back.
						replayed.Add(1)
					case err == nil:
						fresh.Add(1)
					case errors.Is(err, idemkit.ErrInFlight):
						flight.Add(1)
					default:
						t.Errorf("%s: %v", key, err)
					}
				}()
			}
			close(start)
			wg.Wait()
			if n := bizRows(t, f.db, f.biz, key); n != 1 || fresh.Load() != 1 {
				t.Fatalf("%s: %d business rows, %d fresh results; want 1 and 1", key, n, fresh.Load())
			}
			t.Logf("%s: 1 fresh, %d replayed, %d in flight", key, replayed.Load(), flight.Load())
		}
	})
}

// TestWithTxNeverCommits: a Store bound to a transaction leaves commit and rollback to its owner.
func TestWithTxNeverCommits(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, db := setup(t, b)
		rec := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusProcessing, Fence: 1, Owner: "o",
			LeaseUntil: time.Now().Add(time.Minute)}
		tx := db.Begin()
		must(t, tx.Error)
		must(t, s.WithTx(tx).Insert(ctxb, rec))
		must(t, tx.Rollback().Error)
		if _, err := s.Get(ctxb, "s", "k"); !errors.Is(err, idemkit.ErrNotFound) {
			t.Fatalf("gorm: record survived the rollback: %v", err)
		}
		sqlDB, err := db.DB()
		must(t, err)
		stx, err := sqlDB.Begin()
		must(t, err)
		must(t, s.WithSQLTx(stx).Insert(ctxb, rec))
		got, err := s.WithSQLTx(stx).Get(ctxb, "s", "k")
		must(t, err)
		if got.Owner != "o" {
			t.Fatalf("read back %+v", got)
		}
		must(t, stx.Rollback())
		if _, err := s.Get(ctxb, "s", "k"); !errors.Is(err, idemkit.ErrNotFound) {
			t.Fatalf("sql.Tx: record survived the rollback: %v", err)
		}
		// Rebinding a Store bound to one kind of transaction to the other uses the right placeholders.
		must(t, db.Transaction(func(tx *gorm.DB) error {
			st := s.WithSQLTx(nil).WithTx(tx)
			if err := st.Insert(ctxb, rec); err != nil {
				return err
			}
			_, err := st.Get(ctxb, "s", "k")
			return err
		}))
		stx, err = sqlDB.Begin()
		must(t, err)
		if _, err := s.WithTx(db).WithSQLTx(stx).Get(ctxb, "s", "k"); err != nil {
			t.Fatalf("WithTx(...).WithSQLTx(...).Get: %v", err)
		}
		must(t, stx.Rollback())

		// Misuse fails every call instead of panicking.
		for _, bad := range []*Store{s.WithTx(nil), s.WithSQLTx((*sql.Tx)(nil))} {
			if err := bad.Insert(ctxb, rec); err == nil {
				t.Fatal("Insert on a Store bound to a nil transaction succeeded")
			}
			if _, err := bad.Get(ctxb, "s", "k"); err == nil || errors.Is(err, idemkit.ErrNotFound) {
				t.Fatalf("Get on a nil transaction: %v", err)
			}
		}
	})
}

// TestTxModeSeesRecordCommittedAfterSnapshot: a transaction that read before the record was committed
// elsewhere (so its REPEATABLE READ snapshot predates it) still sees the record through Get's locking
// read and replays it, instead of finding nothing.
func TestTxModeSeesRecordCommittedAfterSnapshot(t *testing.T) {
	for _, b := range append(backends[:2:2], multiBackend) { // MySQL (REPEATABLE READ by default) and PostgreSQL
		t.Run(b.name, func(t *testing.T) {
			f := newTxFixture(t, b, nil)
			call := idemkit.Call{Scope: "tx", Key: "snap"}
			tx := f.db.Begin()
			must(t, tx.Error)
			defer tx.Rollback()
			var n int
			must(t, tx.Raw("SELECT count(*) FROM "+f.biz).Row().Scan(&n)) // takes the snapshot

			if _, err := f.guard.Do(ctxb, call, func(context.Context) ([]byte, error) { return []byte("v1"), nil }); err != nil {
				t.Fatal(err)
			}
			ran := false
			res, err := f.guard.DoTx(ctxb, f.store.WithTx(tx), call, func(context.Context) ([]byte, error) {
				ran = true
				return nil, nil
			})
			// DoTx's read without a lock may miss the record in the old snapshot (MySQL's REPEATABLE
			// READ); its write then meets it, and the stored answer comes with ErrRollbackReplayed.
			if ran {
				if !errors.Is(err, idemkit.ErrRollbackReplayed) {
					t.Fatalf("DoTx in an older snapshot ran and returned %v; want ErrRollbackReplayed", err)
				}
			} else {
				must(t, err)
			}
			if !res.Replayed || string(res.Value) != "v1" {
				t.Fatalf("DoTx in an older snapshot: ran %v, result %+v; want a replay of v1", ran, res)
			}
			t.Logf("%s: the function ran: %v", b.name, ran)
			// Guard.Tx reads outside any snapshot: it replays before running.
			ran = false
			res, err = f.store.Tx(ctxb, f.guard, call, func(context.Context, *gorm.DB) ([]byte, error) { ran = true; return nil, nil })
			if err != nil || ran || !res.Replayed || string(res.Value) != "v1" {
				t.Fatalf("Tx: ran %v, %+v, %v; want a replay of v1 without running", ran, res, err)
			}
		})
	}
}

// TestTxReplayInsideTransactionNotCached: a second call with the same key inside the same transaction
// replays the uncommitted record, but must not cache it: the transaction rolls back, and the key then
// runs again instead of replaying a result that never committed (issue 11, item 3).
func TestTxReplayInsideTransactionNotCached(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		f := newTxFixture(t, b, nil)
		locker := memory.NewLocker(nil)
		g, err := idemkit.New(f.store, &idemkit.Options{Locker: locker})
		must(t, err)
		call := idemkit.Call{Scope: "tx", Key: "phantom"}
		rollback := errors.New("the caller rolls back")
		err = f.db.Transaction(func(tx *gorm.DB) error {
			st := f.store.WithTx(tx)
			for i := range 2 {
				res, err := g.DoTx(ctxb, st, call, func(context.Context) ([]byte, error) { return []byte("first"), nil })
				if err != nil || res.Replayed != (i == 1) {
					t.Errorf("call %d in the transaction: %+v, %v", i, res, err)
				}
			}
			if err := g.MarkTx(ctxb, st, idemkit.Call{Scope: "tx", Key: "phantom-mark"}, func(context.Context) error { return nil }); err != nil {
				t.Errorf("MarkTx: %v", err)
			}
			if err := g.MarkTx(ctxb, st, idemkit.Call{Scope: "tx", Key: "phantom-mark"}, func(context.Context) error { return nil }); !errors.Is(err, idemkit.ErrDuplicate) {
				t.Errorf("second MarkTx in the transaction: %v", err)
			}
			return rollback
		})
		if !errors.Is(err, rollback) {
			t.Fatal(err)
		}
		res, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) { return []byte("after rollback"), nil })
		if err != nil || res.Replayed || string(res.Value) != "after rollback" {
			t.Fatalf("after the rollback: %+v, %v; want a fresh run (a phantom replay was cached)", res, err)
		}
		ran := false
		if err := g.Mark(ctxb, idemkit.Call{Scope: "tx", Key: "phantom-mark"}, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
			t.Fatalf("mark after the rollback: ran=%v, %v", ran, err)
		}
	})
}

// immediateSQLite opens a SQLite database whose transactions take the write lock at BEGIN.
func immediateSQLite(t *testing.T) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(sqlite.Open(t.TempDir()+"/immediate.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate"),
		&gorm.Config{Logger: logger.Discard})
	must(t, err)
	sqlDB, err := db.DB()
	must(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}
