package record

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
)

// TestDoTxPermanentErrorKeptWhenRecordUnwritable: on PostgreSQL a business statement that fails aborts
// the caller's transaction, so DoTx cannot write the REJECTED record after a permanent failure. DoTx
// must still return the function's permanent error (with the Store's), as Guard.Tx does, not the
// Store's error alone: the caller would take a permanent failure for an outage and retry it.
func TestDoTxPermanentErrorKeptWhenRecordUnwritable(t *testing.T) {
	f := newTxFixture(t, backends[1], nil)
	declined := errors.New("invalid order")
	err := f.db.Transaction(func(tx *gorm.DB) error {
		_, err := f.guard.DoTx(ctxb, f.store.WithTx(tx), idemkit.Call{Scope: "tx", Key: "aborted"}, func(ctx context.Context) ([]byte, error) {
			if err := tx.Exec("SELECT 1/0").Error; err != nil {
				return nil, idemkit.Permanent(errors.Join(declined, err))
			}
			return nil, errors.New("the statement did not fail")
		})
		return err
	})
	if !idemkit.IsPermanent(err) || !errors.Is(err, declined) {
		t.Fatalf("DoTx after an aborted transaction: %v; want the function's permanent error", err)
	}
	if _, gerr := f.store.Get(ctxb, "tx", "aborted"); !errors.Is(gerr, idemkit.ErrNotFound) {
		t.Fatalf("record: %v, want none", gerr)
	}
}

// TestDoTxRetryableErrorAloneAfterAbortedTransaction: on PostgreSQL a business statement that fails
// aborts the caller's transaction, so DoTx's read for a record finished meanwhile fails too. That
// read is best effort: the answer is the function's retryable error, not joined with
// ErrStoreUnavailable — the caller would report an outage of a store that is up.
func TestDoTxRetryableErrorAloneAfterAbortedTransaction(t *testing.T) {
	f := newTxFixture(t, backends[1], nil)
	busy := errors.New("stock row busy, try again")
	err := f.db.Transaction(func(tx *gorm.DB) error {
		_, err := f.guard.DoTx(ctxb, f.store.WithTx(tx), idemkit.Call{Scope: "tx", Key: "aborted-retry"}, func(ctx context.Context) ([]byte, error) {
			if err := tx.Exec("SELECT 1/0").Error; err != nil {
				return nil, errors.Join(busy, err)
			}
			return nil, errors.New("the statement did not fail")
		})
		return err
	})
	if !errors.Is(err, busy) || errors.Is(err, idemkit.ErrStoreUnavailable) || idemkit.IsPermanent(err) {
		t.Fatalf("DoTx after an aborted transaction: %v; want the function's retryable error alone", err)
	}
	res, err := f.guard.Do(ctxb, idemkit.Call{Scope: "tx", Key: "aborted-retry"}, func(context.Context) ([]byte, error) { return []byte("ran"), nil })
	if err != nil || res.Replayed || string(res.Value) != "ran" {
		t.Fatalf("retry: %+v, %v; want the function to run", res, err)
	}
}
