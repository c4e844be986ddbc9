package record

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// txCall runs key through Store.Tx (gorm) or Store.SQLTx (database/sql) with g: the business inserts
// its row, then fail decides what the function does (nil: a result; an error: returns it; a string:
// panics with it).
func (f *txFixture) txCall(g *idemkit.Guard, flavour, key string, fail any) (idemkit.Result, error) {
	call := idemkit.Call{Scope: "gtx", Key: key}
	after := func(ctx context.Context) ([]byte, error) {
		f.runs.Add(1)
		time.Sleep(f.hold)
		return f.outcome(key, fail)
	}
	if flavour == "sql" {
		insert := "INSERT INTO " + f.biz + " (k, fence) VALUES (?, ?)"
		if f.store.Dialect() == dialectPostgres {
			insert = "INSERT INTO " + f.biz + " (k, fence) VALUES ($1, $2)"
		}
		return f.store.SQLTx(ctxb, g, call, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			fence, _ := idemkit.FenceFromContext(ctx)
			if _, err := tx.ExecContext(ctx, insert, key, fence); err != nil {
				return nil, err
			}
			return after(ctx)
		})
	}
	return f.store.Tx(ctxb, g, call, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
		fence, _ := idemkit.FenceFromContext(ctx)
		if err := tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, ?)", key, fence).Error; err != nil {
			return nil, err
		}
		return after(ctx)
	})
}

// wantRecord fails t unless key's record has status (none when status is "") and key has rows
// business rows.
func (f *txFixture) wantRecord(t *testing.T, key string, rows int, status idemkit.Status) *idemkit.Record {
	t.Helper()
	if n := bizRows(t, f.db, f.biz, key); n != rows {
		t.Fatalf("%s: %d business rows, want %d", key, n, rows)
	}
	rec, err := f.store.Get(ctxb, "gtx", key)
	switch {
	case status == "" && !errors.Is(err, idemkit.ErrNotFound):
		t.Fatalf("%s: record %+v, %v; want none", key, rec, err)
	case status != "" && (err != nil || rec.Status != status):
		t.Fatalf("%s: record %+v, %v; want %s", key, rec, err, status)
	}
	return rec
}

// TestGuardTx: the guard-owned transaction commits the business and the final record together, written
// once; a duplicate is answered before the function runs (from the record without a Locker, from the
// cache with one); a retryable failure leaves nothing, a permanent one leaves a REJECTED record and
// no business write; a panic rolls back.
func TestGuardTx(t *testing.T) {
	eachTxBackend(t, func(t *testing.T, b backend) {
		for _, mode := range []string{"gorm", "gorm+PrepareStmt", "sql"} {
			t.Run(mode, func(t *testing.T) {
				var cfg *gorm.Config
				if mode == "gorm+PrepareStmt" {
					cfg = &gorm.Config{PrepareStmt: true, Logger: logger.Discard}
				}
				f := newTxFixture(t, b, cfg)
				flavour := map[bool]string{true: "sql", false: "gorm"}[mode == "sql"]
				locked, err := idemkit.New(f.store, &idemkit.Options{Locker: memory.NewLocker(nil)})
				must(t, err)
				for name, g := range map[string]*idemkit.Guard{"NoLocker": f.guard, "Locker": locked} {
					t.Run(name, func(t *testing.T) {
						key := func(k string) string { return name + "-" + k }
						f.runs.Store(0)
						res, err := f.txCall(g, flavour, key("ok"), nil)
						if err != nil || res.Replayed || string(res.Value) != "paid "+key("ok") || res.Fence != 1 {
							t.Fatalf("first call: %+v, %v", res, err)
						}
						rec := f.wantRecord(t, key("ok"), 1, idemkit.StatusSucceeded)
						if string(rec.Response) != "paid "+key("ok") || rec.Fence != 1 || rec.ExpiresAt.IsZero() {
							t.Fatalf("stored %+v", rec)
						}
						for range 2 {
							res, err = f.txCall(g, flavour, key("ok"), errors.New("must not run"))
							if err != nil || !res.Replayed || string(res.Value) != "paid "+key("ok") || f.runs.Load() != 1 {
								t.Fatalf("duplicate: %+v, %v after %d runs; want a replay without running", res, err, f.runs.Load())
							}
						}

						boom := errors.New("boom")
						if _, err := f.txCall(g, flavour, key("retry"), boom); !errors.Is(err, boom) {
							t.Fatalf("retryable failure: %v", err)
						}
						f.wantRecord(t, key("retry"), 0, "")
						if res, err := f.txCall(g, flavour, key("retry"), nil); err != nil || res.Replayed {
							t.Fatalf("retry: %+v, %v; want a fresh run", res, err)
						}
						f.wantRecord(t, key("retry"), 1, idemkit.StatusSucceeded)

						declined := idemkit.Permanent(errors.New("card declined"))
						if _, err := f.txCall(g, flavour, key("perm"), declined); !idemkit.IsPermanent(err) {
							t.Fatalf("permanent failure: %v", err)
						}
						f.wantRecord(t, key("perm"), 0, idemkit.StatusRejected) // the business rolled back
						runs := f.runs.Load()
						_, err = f.txCall(g, flavour, key("perm"), nil)
						var rej *idemkit.RejectedError
						if !errors.As(err, &rej) || rej.Message != "card declined" || f.runs.Load() != runs {
							t.Fatalf("duplicate of a rejection: %v after %d runs; want the stored rejection", err, f.runs.Load()-runs)
						}

						if p := recovered(func() { _, _ = f.txCall(g, flavour, key("panic"), "kaboom") }); p != "kaboom" {
							t.Fatalf("recovered %v", p)
						}
						f.wantRecord(t, key("panic"), 0, "")
						if _, err := f.txCall(g, flavour, key("panic"), nil); err != nil {
							t.Fatalf("after a panic: %v", err)
						}
						f.wantRecord(t, key("panic"), 1, idemkit.StatusSucceeded)
					})
				}
			})
		}
	})
}

// TestGuardTxAnswerNeverDependsOnRunningAgain: a debit runs again for a key another attempt already
// finished (its record is not cached, and the cache vouches, so no read before the function): the
// second debit fails for lack of funds, yet the call answers with the first debit's result, and
// nothing of the second commits. The same on the success path: its INSERT meets the record, and the
// stored answer is replayed.
func TestGuardTxAnswerNeverDependsOnRunningAgain(t *testing.T) {
	eachTxBackend(t, func(t *testing.T, b backend) {
		f := newTxFixture(t, b, nil)
		must(t, f.db.Exec("CREATE TABLE "+f.biz+"_acct (id INT PRIMARY KEY, balance BIGINT NOT NULL)").Error)
		t.Cleanup(func() { f.db.Exec("DROP TABLE " + f.biz + "_acct") })
		must(t, f.db.Exec("INSERT INTO "+f.biz+"_acct (id, balance) VALUES (1, 100)").Error)
		debit := func(g *idemkit.Guard, key string) (idemkit.Result, error) {
			return f.store.Tx(ctxb, g, idemkit.Call{Scope: "debit", Key: key}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
				f.runs.Add(1)
				var bal int64
				if err := tx.Raw("SELECT balance FROM " + f.biz + "_acct WHERE id = 1").Row().Scan(&bal); err != nil {
					return nil, err
				}
				if bal < 100 {
					return nil, idemkit.Permanent(errors.New("insufficient funds"))
				}
				if err := tx.Exec("UPDATE " + f.biz + "_acct SET balance = balance - 100 WHERE id = 1").Error; err != nil {
					return nil, err
				}
				return []byte("debited 100"), nil
			})
		}
		// The first debit through a Guard without a Locker: nothing cached.
		if res, err := debit(f.guard, "d1"); err != nil || string(res.Value) != "debited 100" {
			t.Fatalf("first debit: %+v, %v", res, err)
		}
		// Its duplicate through a Guard whose cache vouches for keys it does not hold: it runs.
		vouching, err := idemkit.New(f.store, &idemkit.Options{Locker: memory.NewLocker(nil)})
		must(t, err)
		res, err := debit(vouching, "d1")
		if err != nil || !res.Replayed || string(res.Value) != "debited 100" {
			t.Fatalf("second debit: %+v, %v; want the first debit's answer replayed", res, err)
		}
		if f.runs.Load() != 2 {
			t.Fatalf("the function ran %d times; want 2 (the second rolled back)", f.runs.Load())
		}
		var bal int64
		must(t, f.db.Raw("SELECT balance FROM "+f.biz+"_acct WHERE id = 1").Row().Scan(&bal))
		if bal != 0 {
			t.Fatalf("balance %d, want 0: one debit", bal)
		}

		// A success that meets the record: fresh Locker again, and a function that would succeed.
		again, err := idemkit.New(f.store, &idemkit.Options{Locker: memory.NewLocker(nil)})
		must(t, err)
		res, err = f.store.Tx(ctxb, again, idemkit.Call{Scope: "debit", Key: "d1"}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
			return []byte("second answer"), tx.Exec("UPDATE " + f.biz + "_acct SET balance = balance + 1 WHERE id = 1").Error
		})
		if err != nil || !res.Replayed || string(res.Value) != "debited 100" {
			t.Fatalf("a run that meets the record: %+v, %v; want the stored answer", res, err)
		}
		must(t, f.db.Raw("SELECT balance FROM "+f.biz+"_acct WHERE id = 1").Row().Scan(&bal))
		if bal != 0 {
			t.Fatalf("balance %d, want 0: the replayed run's write must roll back", bal)
		}
	})
}

// TestGuardTxConcurrentSameKey: without a Locker, concurrent Tx calls of one key end with one commit
// and the others replaying its answer (or in flight), never a second business row.
func TestGuardTxConcurrentSameKey(t *testing.T) {
	eachTxBackend(t, func(t *testing.T, b backend) {
		f := newTxFixture(t, b, nil)
		if b.name == "SQLite" {
			f = newTxFixtureOn(t, immediateSQLite(t))
		}
		f.hold = 50 * time.Millisecond
		for round := range 3 {
			key := fmt.Sprintf("race-%d", round)
			var fresh, replayed, flight atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 4 {
				wg.Go(func() {
					<-start
					res, err := f.txCall(f.guard, "gorm", key, nil)
					switch {
					case err == nil && res.Replayed && string(res.Value) == "paid "+key:
						replayed.Add(1)
					case err == nil && !res.Replayed:
						fresh.Add(1)
					case errors.Is(err, idemkit.ErrInFlight):
						flight.Add(1)
					default:
						t.Errorf("%s: %+v, %v", key, res, err)
					}
				})
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

// TestGuardTxTakesOverWhatItMeets: a record written while the function ran (or missed by a vouching
// cache) that failed is taken over in the same transaction, with the next fence; a live claim is
// answered ErrInFlight and nothing commits.
func TestGuardTxTakesOverWhatItMeets(t *testing.T) {
	eachTxBackend(t, func(t *testing.T, b backend) {
		f := newTxFixture(t, b, nil)
		vouching, err := idemkit.New(f.store, &idemkit.Options{Locker: memory.NewLocker(nil)})
		must(t, err)
		// A failed Execute-mode attempt leaves the key FAILED at fence 1.
		call := idemkit.Call{Scope: "gtx", Key: "failed"}
		if _, err := f.guard.Do(ctxb, call, func(context.Context) ([]byte, error) { return nil, errors.New("flaky") }); err == nil {
			t.Fatal("the failing attempt succeeded")
		}
		res, err := f.txCall(vouching, "gorm", "failed", nil)
		if err != nil || res.Replayed || res.Fence != 2 {
			t.Fatalf("Tx over a FAILED record: %+v, %v; want a fresh run at fence 2", res, err)
		}
		rec := f.wantRecord(t, "failed", 1, idemkit.StatusSucceeded)
		if rec.Fence != 2 {
			t.Fatalf("record fence %d, want 2", rec.Fence)
		}
		// Without a Locker the read before the function finds the FAILED record (on a multi-statement
		// pool: the probe, then the read that ends its transaction) and the call takes it over in a
		// transaction of its own.
		if _, err := f.guard.Do(ctxb, idemkit.Call{Scope: "gtx", Key: "failed-read"}, func(context.Context) ([]byte, error) {
			return nil, errors.New("flaky")
		}); err == nil {
			t.Fatal("the failing attempt succeeded")
		}
		if res, err := f.txCall(f.guard, "gorm", "failed-read", nil); err != nil || res.Replayed || res.Fence != 2 {
			t.Fatalf("Tx without a Locker over a FAILED record: %+v, %v; want a fresh run at fence 2", res, err)
		}
		if rec := f.wantRecord(t, "failed-read", 1, idemkit.StatusSucceeded); rec.Fence != 2 {
			t.Fatalf("record fence %d, want 2", rec.Fence)
		}
		if res, err := f.txCall(f.guard, "gorm", "failed-read", nil); err != nil || !res.Replayed || res.Fence != 2 {
			t.Fatalf("duplicate after the takeover: %+v, %v; want the replay of fence 2", res, err)
		}
		// A live Execute-mode claim: in flight, and the business rolls back.
		cl, _, err := f.guard.Begin(ctxb, idemkit.Call{Scope: "gtx", Key: "live"})
		must(t, err)
		defer cl.Detach(ctxb)
		for name, g := range map[string]*idemkit.Guard{"read first": f.guard, "vouching cache": vouching} {
			if _, err := f.txCall(g, "gorm", "live", nil); !errors.Is(err, idemkit.ErrInFlight) {
				t.Fatalf("%s: Tx over a live claim: %v; want ErrInFlight", name, err)
			}
		}
		if n := bizRows(t, f.db, f.biz, "live"); n != 0 {
			t.Fatalf("%d business rows for a key in flight", n)
		}
	})
}

// TestGuardTxUnstorableOutcome: a result larger than the column (MariaDB) rolls the business back and
// leaves the key REJECTED, saying why, so it never runs again to the same end (issue 11, item 4, in Tx
// mode).
func TestGuardTxUnstorableOutcome(t *testing.T) {
	for _, b := range []backend{backends[0], multiBackend} {
		t.Run(b.name, func(t *testing.T) { testGuardTxUnstorableOutcome(t, b) })
	}
}

func testGuardTxUnstorableOutcome(t *testing.T, b backend) {
	f := newTxFixture(t, b, nil)
	var runs atomic.Int32
	huge := func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
		runs.Add(1)
		return make([]byte, maxMySQLResult+1), tx.Exec("INSERT INTO " + f.biz + " (k, fence) VALUES ('huge', 1)").Error
	}
	call := idemkit.Call{Scope: "gtx", Key: "huge"}
	if _, err := f.store.Tx(ctxb, f.guard, call, huge); !errors.Is(err, idemkit.ErrUnstorable) {
		t.Fatalf("first call: %v, want ErrUnstorable", err)
	}
	rec := f.wantRecord(t, "huge", 0, idemkit.StatusRejected)
	if !strings.Contains(rec.Error, "MEDIUMBLOB") {
		t.Fatalf("stored error %q", rec.Error)
	}
	if _, err := f.store.Tx(ctxb, f.guard, call, huge); !errors.Is(err, idemkit.ErrRejected) || runs.Load() != 1 {
		t.Fatalf("retry: %v after %d runs, want the stored rejection and one run", err, runs.Load())
	}
}

// peekBlind hides Peek: a caller's transaction whose snapshot predates the record, deterministically.
type peekBlind struct{ idemkit.Store }

// TestDoTxRollbackReplayed: when DoTx's function ran for a key another attempt finished, DoTx returns
// the stored answer with ErrRollbackReplayed (and ErrRejected for a stored rejection), and returning
// that error from db.Transaction rolls the function's writes back.
func TestDoTxRollbackReplayed(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		f := newTxFixture(t, b, nil)
		for _, tc := range []struct {
			key    string
			stored func(context.Context) ([]byte, error)
			rej    bool
		}{
			{"done", func(context.Context) ([]byte, error) { return []byte("first"), nil }, false},
			{"rejected", func(context.Context) ([]byte, error) { return []byte("why"), idemkit.Permanent(errors.New("no")) }, true},
		} {
			call := idemkit.Call{Scope: "dotx", Key: tc.key}
			_, _ = f.guard.Do(ctxb, call, tc.stored)
			ran := false
			var res idemkit.Result
			err := f.db.Transaction(func(tx *gorm.DB) error {
				var err error
				res, err = f.guard.DoTx(ctxb, peekBlind{f.store.WithTx(tx)}, call, func(ctx context.Context) ([]byte, error) {
					ran = true
					return []byte("second"), tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, 1)", tc.key).Error
				})
				return err
			})
			if !ran || !errors.Is(err, idemkit.ErrRollbackReplayed) || errors.Is(err, idemkit.ErrRejected) != tc.rej {
				t.Fatalf("%s: ran %v, err %v; want ErrRollbackReplayed (rejected %v)", tc.key, ran, err, tc.rej)
			}
			if !res.Replayed || (!tc.rej && string(res.Value) != "first") {
				t.Fatalf("%s: result %+v; want the stored answer", tc.key, res)
			}
			if n := bizRows(t, f.db, f.biz, tc.key); n != 0 {
				t.Fatalf("%s: %d business rows committed", tc.key, n)
			}
		}
	})
}

// TestGormTx: the gorm transaction under a TxStore the Store began is the one the business writes
// through (its row commits with the record); any other TxStore, or nil, has none.
func TestGormTx(t *testing.T) {
	eachTxBackend(t, func(t *testing.T, b backend) {
		f := newTxFixture(t, b, nil)
		var got *gorm.DB
		_, err := f.guard.Tx(ctxb, f.store, idemkit.Call{Scope: "gtx", Key: "gormtx"}, func(ctx context.Context, tx idemkit.TxStore) ([]byte, error) {
			if got = GormTx(tx); got == nil {
				return nil, errors.New("no gorm transaction under the Store's TxStore")
			}
			return []byte("ok"), got.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, ?)", "gormtx", 1).Error
		})
		must(t, err)
		f.wantRecord(t, "gormtx", 1, idemkit.StatusSucceeded)
		if GormTx(nil) != nil {
			t.Error("GormTx(nil) is not nil")
		}
		mem, err := memory.NewStore().BeginTx(ctxb)
		must(t, err)
		defer func() { _ = mem.Rollback() }()
		if GormTx(mem) != nil {
			t.Error("GormTx of another Store's transaction is not nil")
		}
	})
}
