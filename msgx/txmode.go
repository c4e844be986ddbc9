package msgx

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/record"
)

// runTx is msgx's one call into the engine's Tx mode; everything Tx-specific lives here so that the
// write path can change underneath (a guard-owned transaction helper) without touching the rest.
//
// It begins a transaction on db, runs fn in it under guard.DoTx with records bound to it, and commits
// when DoTx returns no error (a first run that succeeded, or a replay), rolling back otherwise. It
// returns DoTx's result, fn's own error (herr, when fn ran and failed) and the call's error; a failure
// to begin or commit is reported as idemkit.ErrStoreUnavailable (nothing is durable).
//
// A permanent failure must leave the record REJECTED but none of fn's writes: the transaction is
// rolled back, then the rejection is recorded on its own with guard.Do (two statements, on the rare
// permanent path only). If another delivery settled the key in between, that outcome is returned
// instead (a replay, or in flight).
func runTx(ctx context.Context, guard *idemkit.Guard, db *gorm.DB, records *record.Store, call idemkit.Call,
	fn func(ctx context.Context, tx *gorm.DB) error) (res idemkit.Result, herr, err error) {
	var callErr error
	txErr := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res, callErr = guard.DoTx(ctx, records.WithTx(tx), call, func(ctx context.Context) ([]byte, error) {
			herr = fn(ctx, tx)
			return nil, herr
		})
		return callErr
	})
	switch {
	case callErr != nil:
		err = callErr
	case txErr != nil: // BEGIN or COMMIT failed: nothing is durable
		return idemkit.Result{}, nil, fmt.Errorf("%w: Tx mode transaction: %w", idemkit.ErrStoreUnavailable, txErr)
	default:
		return res, nil, nil
	}
	if herr == nil || !guard.IsPermanent(herr) || errors.Is(err, idemkit.ErrFenced) || errors.Is(err, idemkit.ErrStoreUnavailable) {
		return res, herr, err
	}
	// Rolled back with fn's writes; record the rejection by itself.
	ran := false
	res, err = guard.Do(ctx, call, func(context.Context) ([]byte, error) {
		ran = true
		return nil, herr
	})
	if !ran {
		herr = nil // settled by another delivery: its outcome is the answer
	}
	return res, herr, err
}
