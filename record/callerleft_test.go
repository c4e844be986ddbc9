package record

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
)

// TestTxMarkCallerLeftIsNotAStoreOutage: a caller whose context ends while its TxMark function runs
// (a client that went away) gets its context's error, as in Tx mode, not idemkit.ErrStoreUnavailable:
// database/sql rolled the transaction back when the context ended, so its COMMIT met a transaction
// already done (sql.ErrTxDone), which the Guard took for a store failure whose commit "may have
// happened or not" — a store outage reported (and counted) for every client that left. Nothing is
// committed, and a retry runs.
func TestTxMarkCallerLeftIsNotAStoreOutage(t *testing.T) {
	eachTxBackend(t, func(t *testing.T, b backend) {
		db := b.db(t, nil)
		s := newTable(t, db)
		biz := bizTable(t, db)
		g, err := idemkit.New(s, nil)
		must(t, err)
		for _, mode := range []string{"TxMark", "Tx"} {
			ctx, cancel := context.WithCancel(ctxb)
			call := idemkit.Call{Scope: "left", Key: mode}
			business := func(tx *gorm.DB) error {
				if err := tx.Exec("INSERT INTO "+biz+" (k, fence) VALUES (?, 1)", mode).Error; err != nil {
					return err
				}
				cancel() // the caller leaves; the function carries on to its end
				// Wait until database/sql has rolled the transaction back (a statement outside the
				// ended context then finds it done), as it does soon after the context ends.
				deadline := time.Now().Add(5 * time.Second)
				for !errors.Is(tx.WithContext(context.Background()).Exec("SELECT 1").Error, sql.ErrTxDone) && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				return nil
			}
			if b.name == multiBackend.name {
				business = func(tx *gorm.DB) error { // a held connection: no rollback happens on its own
					cancel()
					return tx.WithContext(context.Background()).Exec("INSERT INTO "+biz+" (k, fence) VALUES (?, 1)", mode).Error
				}
			}
			if mode == "TxMark" {
				err = s.TxMark(ctx, g, call, func(_ context.Context, tx *gorm.DB) error { return business(tx) })
			} else {
				_, err = s.Tx(ctx, g, call, func(_ context.Context, tx *gorm.DB) ([]byte, error) { return []byte("v"), business(tx) })
			}
			if !errors.Is(err, context.Canceled) || errors.Is(err, idemkit.ErrStoreUnavailable) {
				t.Fatalf("%s whose caller left: %v; want the context's error, not ErrStoreUnavailable", mode, err)
			}
			if n := bizRows(t, db, biz, mode); n != 0 {
				t.Fatalf("%s: %d business rows committed for a call answered with its context's error", mode, n)
			}
			if _, err := s.Get(ctxb, "left", mode); !errors.Is(err, idemkit.ErrNotFound) {
				t.Fatalf("%s: a record for a call answered with its context's error: %v", mode, err)
			}
			if mode == "TxMark" {
				err = s.TxMark(ctxb, g, call, func(_ context.Context, tx *gorm.DB) error {
					return tx.Exec("INSERT INTO "+biz+" (k, fence) VALUES (?, 1)", mode).Error
				})
			} else {
				_, err = s.Tx(ctxb, g, call, func(_ context.Context, tx *gorm.DB) ([]byte, error) {
					return []byte("v"), tx.Exec("INSERT INTO "+biz+" (k, fence) VALUES (?, 1)", mode).Error
				})
			}
			if err != nil || bizRows(t, db, biz, mode) != 1 {
				t.Fatalf("%s: the retry: %v, %d business rows; want it run once", mode, err, bizRows(t, db, biz, mode))
			}
		}
	})
}
