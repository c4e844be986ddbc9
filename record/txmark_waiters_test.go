package record

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
)

// TestTxMarkWaitersAfterRollback: concurrent duplicates of a TxMark (no Locker) while the first attempt
// holds the mark and then fails or commits: every waiter gets ErrDuplicate, ErrInFlight, or runs — never
// a store error (InnoDB deadlocks the INSERTs waiting on a mark whose transaction rolls back: the Store
// runs such a transaction again, nothing of it having run) — and one business row is left. The Guard
// runs the transaction again, so guard.TxMark on the Store gets the same as store.TxMark.
func TestTxMarkWaitersAfterRollback(t *testing.T) {
	for _, b := range []backend{backends[0], backends[1], multiBackend} {
		for _, failFirst := range []bool{true, false} {
			name := b.name + "/commit"
			if failFirst {
				name = b.name + "/rollback"
			}
			t.Run(name, func(t *testing.T) {
				f := newTxFixture(t, b, nil)
				// Waiters alternate between the Store's TxMark and the Guard's.
				var n atomic.Int32
				txMark := func(call idemkit.Call, fn TxMarkFunc) error {
					if n.Add(1)%2 == 0 {
						return f.store.TxMark(ctxb, f.guard, call, fn)
					}
					return f.guard.TxMark(ctxb, f.store, call, func(ctx context.Context, tx idemkit.TxStore) error {
						return fn(ctx, GormTx(tx))
					})
				}
				for round := 0; round < 3; round++ {
					key := "w" + string(rune('a'+round))
					call := idemkit.Call{Scope: "waiters", Key: key}
					started := make(chan struct{})
					var first error
					var wg sync.WaitGroup
					wg.Add(1)
					go func() {
						defer wg.Done()
						first = f.store.TxMark(ctxb, f.guard, call, func(ctx context.Context, tx *gorm.DB) error {
							if err := tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, 1)", key).Error; err != nil {
								return err
							}
							close(started)
							time.Sleep(300 * time.Millisecond)
							if failFirst {
								return errors.New("boom")
							}
							return nil
						})
					}()
					<-started
					var runs, bad atomic.Int32
					for range 6 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							err := txMark(call, func(ctx context.Context, tx *gorm.DB) error {
								runs.Add(1)
								return tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, 2)", key).Error
							})
							switch {
							case err == nil, errors.Is(err, idemkit.ErrDuplicate), errors.Is(err, idemkit.ErrInFlight):
							default:
								bad.Add(1)
								t.Errorf("round %d: duplicate got %v", round, err)
							}
						}()
					}
					wg.Wait()
					if n := bizRows(t, f.db, f.biz, key); n != 1 {
						t.Errorf("round %d: %d business rows (first: %v, runs %d)", round, n, first, runs.Load())
					}
				}
			})
		}
	}
}
