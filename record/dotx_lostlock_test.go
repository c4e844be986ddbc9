package record

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
)

// TestDoTxDuplicateAfterLostLockReplays: Redis lost the lock of a DoTx call while its function ran (a
// restart without persistence, here FLUSHALL on a private server), a duplicate took the key and
// finished it, and the function's own debit then failed on the balance's CHECK. On PostgreSQL that
// failed statement aborts the caller's transaction, so DoTx's read for a record finished meanwhile
// failed as well, and the call was answered with the failed debit's error — retryable, or for a
// permanent one that error joined with ErrStoreUnavailable — instead of the first debit's success.
// DoTx now reads the record outside the aborted transaction and replays it, with
// ErrRollbackReplayed, as on MariaDB.
func TestDoTxDuplicateAfterLostLockReplays(t *testing.T) {
	p := testsvc.StartRedis(t)
	rdb := redis.NewClient(p.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	eachBackend(t, func(t *testing.T, b backend) {
		if b.name == "SQLite" {
			t.Skip("one writer at a time: the duplicate cannot commit while the call's transaction is open")
		}
		db := b.db(t, nil)
		s := newTable(t, db)
		acct := testsvc.Name("acct_")
		testsvc.DropTable(t, db, acct)
		must(t, db.Exec("CREATE TABLE "+acct+" (k VARCHAR(64) PRIMARY KEY, bal INT NOT NULL CHECK (bal >= 0))").Error)
		g, err := idemkit.New(s, &idemkit.Options{Locker: lock.New(rdb, &lock.Options{Prefix: testsvc.Name("lostlock") + ":"})})
		must(t, err)
		for _, permanent := range []bool{false, true} {
			t.Run(fmt.Sprintf("permanent=%v", permanent), func(t *testing.T) {
				key := testsvc.Name("k")
				must(t, db.Exec("INSERT INTO "+acct+" (k, bal) VALUES (?, 150)", key).Error)
				call := idemkit.Call{Scope: "pay", Key: key}
				var effects atomic.Int32
				debit := func(tx *gorm.DB) ([]byte, error) {
					if err := tx.Exec("UPDATE "+acct+" SET bal = bal - 100 WHERE k = ?", key).Error; err != nil {
						if permanent {
							return nil, idemkit.Permanent(fmt.Errorf("insufficient funds: %w", err))
						}
						return nil, fmt.Errorf("insufficient funds: %w", err)
					}
					effects.Add(1)
					return []byte("paid " + key), nil
				}
				inside, resume := make(chan struct{}), make(chan struct{})
				type answer struct {
					res idemkit.Result
					err error
				}
				late := make(chan answer, 1)
				go func() {
					var res idemkit.Result
					var err error
					terr := db.Transaction(func(tx *gorm.DB) error {
						res, err = g.DoTx(ctxb, s.WithTx(tx), call, func(context.Context) ([]byte, error) {
							close(inside)
							<-resume
							return debit(tx)
						})
						return err
					})
					late <- answer{res, errors.Join(err, terr)}
				}()
				<-inside
				must(t, rdb.FlushAll(ctxb).Err()) // Redis restarted empty: the lock is gone
				first, err := s.Tx(ctxb, g, call, func(_ context.Context, tx *gorm.DB) ([]byte, error) { return debit(tx) })
				if err != nil || first.Replayed {
					t.Fatalf("the duplicate that took the key: %+v, %v", first, err)
				}
				close(resume)
				got := <-late
				var bal int
				must(t, db.Raw("SELECT bal FROM "+acct+" WHERE k = ?", key).Row().Scan(&bal))
				if bal != 50 || effects.Load() != 1 {
					t.Fatalf("balance %d after %d debits; want 50 after 1", bal, effects.Load())
				}
				if !errors.Is(got.err, idemkit.ErrRollbackReplayed) || !got.res.Replayed || string(got.res.Value) != string(first.Value) {
					t.Fatalf("the call whose lock Redis lost: %+v, %v; want the stored %q replayed with ErrRollbackReplayed", got.res, got.err, first.Value)
				}
			})
		}
	})
}

// TestDoTxSnapshotDuplicateReplays: a DoTx call in a PostgreSQL REPEATABLE READ transaction ran its
// function for a key another attempt finished after the transaction's snapshot (Redis lost the lock:
// FLUSHALL on a private server). The record's INSERT then failed with a serialization failure, which
// aborts the transaction, and the call was answered "record store unavailable ... run it again"
// instead of the stored result. DoTx now reads the record outside the aborted transaction and
// replays it with ErrRollbackReplayed, as Guard.Tx answers a write conflict.
func TestDoTxSnapshotDuplicateReplays(t *testing.T) {
	p := testsvc.StartRedis(t)
	rdb := redis.NewClient(p.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	db := backends[1].db(t, nil) // PostgreSQL
	s := newTable(t, db)
	g, err := idemkit.New(s, &idemkit.Options{Locker: lock.New(rdb, &lock.Options{Prefix: testsvc.Name("snap") + ":"})})
	must(t, err)
	call := idemkit.Call{Scope: "pay", Key: testsvc.Name("k")}
	var runs atomic.Int32
	inside, resume := make(chan struct{}), make(chan struct{})
	late := make(chan error, 1)
	var res idemkit.Result
	go func() {
		var err error
		terr := db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").Error; err != nil {
				return err
			}
			res, err = g.DoTx(ctxb, s.WithTx(tx), call, func(context.Context) ([]byte, error) {
				runs.Add(1)
				close(inside)
				<-resume
				return []byte("second"), nil
			})
			return err
		})
		late <- errors.Join(err, terr)
	}()
	<-inside
	must(t, rdb.FlushAll(ctxb).Err()) // Redis restarted empty: the lock is gone
	first, err := s.Tx(ctxb, g, call, func(context.Context, *gorm.DB) ([]byte, error) { runs.Add(1); return []byte("first"), nil })
	if err != nil || first.Replayed {
		t.Fatalf("the duplicate that took the key: %+v, %v", first, err)
	}
	close(resume)
	err = <-late
	if !errors.Is(err, idemkit.ErrRollbackReplayed) || !res.Replayed || string(res.Value) != "first" || runs.Load() != 2 {
		t.Fatalf("the call whose lock Redis lost: %+v, %v (%d runs); want %q replayed with ErrRollbackReplayed", res, err, runs.Load(), "first")
	}
	rec, err := s.Get(ctxb, call.Scope, call.Key)
	if err != nil || string(rec.Response) != "first" {
		t.Fatalf("record %+v, %v; want the first result", rec, err)
	}
}
