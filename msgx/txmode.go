package msgx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/ownedtx"
	"github.com/idemkit/idemkit/record"
)

// runTx is msgx's one call into the engine's Tx mode: [idemkit.Guard.Tx], which owns the
// transaction. The Guard begins it on db (through gormBeginner), runs fn in it, writes the record
// once with its final status beside fn's writes, commits, and only then releases the lock and
// caches the result. A permanent failure rolls fn's writes back and is recorded REJECTED on its own
// by the Guard; a duplicate of a finished key is answered before fn runs, and one that finished
// while fn ran (found by the record's INSERT) rolls fn's writes back and is replayed.
//
// It returns the Guard's result and error, and herr: fn's own error when it is this delivery's
// outcome — recorded REJECTED (permanent) or rolled back with nothing recorded (retryable). herr is
// nil when fn did not run, succeeded, or when its outcome is not the answer: another delivery's
// record was replayed instead, or fn's writes were rolled back without its outcome being recorded
// (the Guard's error then says why: store unavailable, in flight, payload mismatch) — except when the
// record could not be written because fn ignored a failed statement's error (record.ErrTxAborted), or
// the COMMIT refused fn's writes (a deferred constraint): herr is then that error, marked retryable,
// fn's failure.
func runTx(ctx context.Context, guard *idemkit.Guard, db *gorm.DB, records *record.Store, call idemkit.Call,
	fn func(ctx context.Context, tx *gorm.DB) error) (res idemkit.Result, herr, err error) {
	res, err = guard.Tx(ctx, gormBeginner{Store: records, db: db}, call, func(ctx context.Context, tx idemkit.TxStore) ([]byte, error) {
		herr = fn(ctx, tx.(*gormTx).biz)
		return nil, herr
	})
	if res.Replayed || !sameError(err, herr) {
		// The Guard returns fn's error as it is only when that error is the outcome (stored as
		// REJECTED, or retryable and rolled back); anything it replaced or joined was not recorded.
		herr = nil
	}
	var refused *commitRefusedError
	if herr == nil && err != nil && !res.Replayed && (errors.Is(err, record.ErrTxAborted) || errors.As(err, &refused)) {
		// fn returned nil after ignoring a failed statement's error (the database aborted or
		// ended the transaction, so its record could not follow), or its writes broke a deferred
		// constraint, refused at COMMIT: fn's failure, which every delivery repeats, not a store
		// outage — counted against Options.MaxAttempts, retryable whatever IsPermanent says of it
		// (nothing is recorded: no rejection could be replayed).
		herr = idemkit.Retryable(err)
	}
	return res, herr, err
}

// conflictVictim reports whether herr, a Tx-mode handler's error that is its delivery's outcome (see
// runTx), is a write conflict the database ended the transaction on (record.IsConflict: a deadlock,
// a serialization failure) — one the handler returned, not one it ignored (record.ErrTxAborted: the
// handler's own failure, which every delivery may repeat).
func conflictVictim(records *record.Store, herr error) bool {
	return herr != nil && !errors.Is(herr, record.ErrTxAborted) && records.IsConflict(herr)
}

// sameError reports whether a and b are the same error value. Unlike a == b it does not panic when
// both hold the same uncomparable type (a struct with a slice, say); such values are told apart by
// their text.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	t := reflect.TypeOf(a)
	if t != reflect.TypeOf(b) {
		return false
	}
	if t.Comparable() {
		return a == b
	}
	return a.Error() == b.Error()
}

// gormBeginner is the [idemkit.TxBeginner] of Guard.Tx in msgx: the record Store, whose transactions
// begin on db — the handle the consumer was given, so the handler's transaction has db's session
// settings (logger, prepared statements) — with the Store bound to each.
type gormBeginner struct {
	*record.Store
	db *gorm.DB
}

// BeginTxGet only reads: the transaction must be begun on db, by BeginTx (the Store's own would begin
// one on its gorm.DB, with another type).
func (b gormBeginner) BeginTxGet(ctx context.Context, scope, key string) (idemkit.TxStore, *idemkit.Record, error) {
	rec, err := b.Get(ctx, scope, key)
	return nil, rec, err
}

// BeginTx implements idemkit.TxBeginner.
func (b gormBeginner) BeginTx(ctx context.Context) (idemkit.TxStore, error) {
	// On a connection of its own (package internal/ownedtx): one whose COMMIT or ROLLBACK failed is
	// never returned to the pool with the transaction still open on the server.
	otx, err := ownedtx.BeginGorm(ctx, b.db)
	if err != nil {
		return nil, fmt.Errorf("msgx: beginning the Tx-mode transaction: %w", err)
	}
	st, biz := b.Store.WithSealedTx(otx.Gorm)
	return &gormTx{Store: st, tx: otx, biz: biz}, nil
}

// gormTx is a gorm transaction gormBeginner began, with the record Store bound to it.
type gormTx struct {
	*record.Store
	tx  *ownedtx.Tx
	biz *gorm.DB // the handler's session of tx: it refuses Commit and Rollback (the Guard ends tx)
}

// Commit implements idemkit.TxStore. A COMMIT the database refused on a write conflict wraps
// record.ErrConflict, as the record Store's own transactions' COMMIT does: on Galera, the
// certification failure (or brute-force abort) of a duplicate delivery whose copy committed through
// another node. Nothing of the transaction committed, and the Guard answers from the record of the
// attempt that won (a Duplicate), or, when there is none (a conflict over the handler's other rows),
// fails the call as a commit that did not happen: Failed, retried, not counted against
// Options.MaxAttempts (a run again may commit; the handler did nothing every delivery repeats).
func (t *gormTx) Commit() error {
	if err := t.tx.Commit(); err != nil {
		switch {
		case record.IsConflict(err):
			return fmt.Errorf("msgx: committing: %w: %w", record.ErrConflict, err)
		case refusedData(err):
			return &commitRefusedError{err}
		}
		return fmt.Errorf("msgx: committing: %w", err)
	}
	return nil
}

// commitRefusedError is a COMMIT the database refused for the handler's data: the transaction rolled
// back, and every delivery of the message fails the same way (see refusedData).
type commitRefusedError struct{ err error }

func (e *commitRefusedError) Error() string {
	return "msgx: committing: the database refused the handler's writes (a deferred constraint): " + e.err.Error()
}
func (e *commitRefusedError) Unwrap() error { return e.err }

// refusedData reports whether err, a COMMIT's, is PostgreSQL's refusal of a deferred constraint
// (SQLSTATE class 23, integrity constraint violation): the server rolled the transaction back.
func refusedData(err error) bool {
	var e interface{ SQLState() string }
	return errors.As(err, &e) && strings.HasPrefix(e.SQLState(), "23")
}

// Rollback implements idemkit.TxStore.
func (t *gormTx) Rollback() error {
	if err := t.tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("msgx: rolling back: %w", err)
	}
	return nil
}
