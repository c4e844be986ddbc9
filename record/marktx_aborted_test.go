package record

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
)

// TestMarkTxRetryableErrorAloneAfterAbortedTransaction: on PostgreSQL a business statement that fails
// aborts the caller's transaction, so MarkTx's removal of the mark after the function's retryable
// failure cannot run in it. The caller rolls back on the error as the contract says, and the mark goes
// with it: the answer is the function's error alone — not "record store unavailable", and a
// serialization failure of the business stays recognisable as one (IsConflict), so the caller runs
// its transaction again — and the retry runs.
func TestMarkTxRetryableErrorAloneAfterAbortedTransaction(t *testing.T) {
	for _, tc := range []struct {
		name string
		biz  func(tx *gorm.DB) error
		want func(err error) bool
	}{
		{"failed statement", func(tx *gorm.DB) error { return tx.Exec("SELECT 1/0").Error },
			func(err error) bool { return sqlState(err) == "22012" }},
		{"serialization failure", func(tx *gorm.DB) error {
			return tx.Exec("DO $$ BEGIN RAISE EXCEPTION 'write skew' USING ERRCODE = 'serialization_failure'; END $$").Error
		}, IsConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTxFixture(t, backends[1], nil)
			call := idemkit.Call{Scope: "tx", Key: "aborted-mark"}
			var ferr error
			err := f.db.Transaction(func(tx *gorm.DB) error {
				return f.guard.MarkTx(ctxb, f.store.WithTx(tx), call, func(ctx context.Context) error {
					ferr = tc.biz(tx)
					if ferr == nil {
						return errors.New("the statement did not fail")
					}
					return ferr
				})
			})
			if !errors.Is(err, ferr) || !tc.want(err) || errors.Is(err, idemkit.ErrStoreUnavailable) || idemkit.IsPermanent(err) {
				t.Fatalf("MarkTx after an aborted transaction: %v; want the function's error alone", err)
			}
			ran := false
			if err := f.guard.Mark(ctxb, call, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
				t.Fatalf("retry: ran %v, %v; want the function to run", ran, err)
			}
		})
	}
}
