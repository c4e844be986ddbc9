package idemkit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// conflictedTx is a caller's transaction that the database rolls back on a write conflict at the
// record's INSERT, with no attempt of the key behind it: a deadlock over the business's rows, or on
// Galera a brute-force abort by another key's write set.
type conflictedTx struct {
	idemkit.TxStore
}

func (t conflictedTx) Insert(context.Context, *idemkit.Record) error {
	return fmt.Errorf("inserting: Error 1213: deadlock found: %w", idemkit.ErrConflict)
}

// newConflictCase returns a memory Store, a Guard on it with its recorder, and a transaction begun
// on the Store (the caller's, which conflictedTx wraps).
func newConflictCase(t *testing.T) (*memory.Store, *idemkit.Guard, *recorder, idemkit.TxStore) {
	t.Helper()
	st := memory.NewStore()
	obs := &recorder{}
	g, err := idemkit.New(st, &idemkit.Options{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := st.BeginTx(ctxb)
	if err != nil {
		t.Fatal(err)
	}
	return st, g, obs, tx
}

// TestDoTxRecordWriteConflictIsNotAnOutage: a DoTx call whose record INSERT, after its function ran
// in the caller's transaction, failed on a write conflict no attempt of the key won (on Galera a
// certification failure or brute-force abort; on one server a deadlock) was answered "record store
// unavailable", the call's outcome "unavailable": an outage to alert on, for a conflict the caller
// resolves by running its transaction again. Nothing of it committed: it is a failure of the call
// matching ErrConflict, the key free for that retry (found by a defect hunt).
func TestDoTxRecordWriteConflictIsNotAnOutage(t *testing.T) {
	st, g, obs, tx := newConflictCase(t)
	call := idemkit.Call{Scope: "s", Key: "k"}
	runs := 0
	fn := func(context.Context) ([]byte, error) { runs++; return []byte("done"), nil }
	_, err := g.DoTx(ctxb, conflictedTx{tx}, call, fn)
	_ = tx.Rollback()
	if !errors.Is(err, idemkit.ErrConflict) || errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("DoTx whose record's INSERT hit a write conflict: %v; want an error matching ErrConflict and not ErrStoreUnavailable", err)
	}
	if ev := obs.last(t); ev.Outcome == idemkit.OutcomeUnavailable {
		t.Fatalf("outcome %v; want no store outage", ev.Outcome)
	}
	tx, err = st.BeginTx(ctxb)
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.DoTx(ctxb, tx, call, fn)
	if err != nil || res.Replayed || string(res.Value) != "done" || runs != 2 {
		t.Fatalf("the caller's retry: %+v, %v after %d runs; want the function run", res, err, runs)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestMarkTxClaimWriteConflictIsNotAnOutage: MarkTx's mark, written in the caller's transaction
// before the function, failed on a write conflict no attempt of the key won — on Galera a
// certification failure or brute-force abort (about a hundred calls of a 1,500-key storm over three
// nodes), on one server a deadlock — and was answered "record store unavailable", outcome
// "unavailable", with a watch started for a mark that could not land: the database had rolled the
// transaction back. It is a retryable failure matching ErrConflict, the function not run, the key
// free for the caller's rerun (found by a defect hunt).
func TestMarkTxClaimWriteConflictIsNotAnOutage(t *testing.T) {
	st, g, obs, tx := newConflictCase(t)
	call := idemkit.Call{Scope: "s", Key: "k"}
	runs := 0
	fn := func(context.Context) error { runs++; return nil }
	err := g.MarkTx(ctxb, conflictedTx{tx}, call, fn)
	_ = tx.Rollback()
	if !errors.Is(err, idemkit.ErrConflict) || errors.Is(err, idemkit.ErrStoreUnavailable) || !idemkit.IsRetryable(err) || runs != 0 {
		t.Fatalf("MarkTx whose mark hit a write conflict: %v after %d runs; want a retryable error matching ErrConflict, not ErrStoreUnavailable, the function not run", err, runs)
	}
	if ev := obs.last(t); ev.Outcome == idemkit.OutcomeUnavailable || ev.Outcome == idemkit.OutcomeExecuted {
		t.Fatalf("outcome %v; want neither a store outage nor a run", ev.Outcome)
	}
	tx, err = st.BeginTx(ctxb)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.MarkTx(ctxb, tx, call, fn); err != nil || runs != 1 {
		t.Fatalf("the caller's retry: %v after %d runs; want the function run", err, runs)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}
