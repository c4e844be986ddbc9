package idemkit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// commitLoser is a TxBeginner whose transactions lose their COMMIT to another writer of the key, as
// a Galera certification failure does: the COMMIT rolls the transaction back and fails with a write
// conflict, the other attempt's record committed (won is how).
type commitLoser struct {
	*memory.Store
	won func()
}

func (b commitLoser) BeginTx(ctx context.Context) (idemkit.TxStore, error) {
	tx, err := b.Store.BeginTx(ctx)
	if err != nil {
		return nil, err
	}
	return &losingTx{TxStore: tx, won: b.won}, nil
}

type losingTx struct {
	idemkit.TxStore
	won func()
}

func (t *losingTx) Commit() error {
	if err := t.TxStore.Rollback(); err != nil {
		return err
	}
	t.won()
	return fmt.Errorf("commit: certification failed: %w", idemkit.ErrConflict)
}

// TestTxCommitConflictReplaysTheWinner: a Tx-mode call whose COMMIT the database refused on a write
// conflict with another attempt of the key (on Galera, the usual end of a duplicate sent through two
// nodes at once) is answered with that attempt's record, as a conflict at the record's INSERT is —
// concurrent duplicates end with one commit and one replayed answer. It answered ErrStoreUnavailable
// (503), although a conflict at COMMIT means nothing of it committed and the winner's answer was
// readable.
func TestTxCommitConflictReplaysTheWinner(t *testing.T) {
	st := memory.NewStore()
	call := idemkit.Call{Scope: "s", Key: "k"}
	won := func() {
		now := time.Now()
		err := st.Insert(ctxb, &idemkit.Record{Scope: call.Scope, Key: call.Key, Status: idemkit.StatusSucceeded,
			Fence: 1, Owner: "the other node", Response: []byte("winner"), CreatedAt: now, UpdatedAt: now,
			LeaseUntil: now, ExpiresAt: now.Add(time.Hour)})
		if err != nil {
			t.Errorf("the winner's record: %v", err)
		}
	}
	g, err := idemkit.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Tx(ctxb, commitLoser{st, won}, call, func(context.Context, idemkit.TxStore) ([]byte, error) {
		return []byte("loser"), nil
	})
	if err != nil || !res.Replayed || string(res.Value) != "winner" {
		t.Fatalf("the attempt whose COMMIT lost answered %q (replayed %v), %v; want the winner's answer replayed", res.Value, res.Replayed, err)
	}
}

// TestTxMarkCommitConflictIsADuplicate: a TxMark whose COMMIT the database refused on a write conflict
// with another attempt's mark (a Galera certification failure) is answered ErrDuplicate once that
// mark is readable: nothing of it committed, and the key is marked. It answered ErrStoreUnavailable,
// an unknown outcome, although the outcome was known.
func TestTxMarkCommitConflictIsADuplicate(t *testing.T) {
	st := memory.NewStore()
	call := idemkit.Call{Scope: "s", Key: "k"}
	won := func() {
		now := time.Now()
		err := st.Insert(ctxb, &idemkit.Record{Scope: call.Scope, Key: call.Key, Status: idemkit.StatusSucceeded,
			Fence: 1, Owner: "the other node", CreatedAt: now, UpdatedAt: now, LeaseUntil: now, ExpiresAt: now.Add(time.Hour)})
		if err != nil {
			t.Errorf("the winner's mark: %v", err)
		}
	}
	g, err := idemkit.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = g.TxMark(ctxb, commitLoser{st, won}, call, func(context.Context, idemkit.TxStore) error { return nil })
	if !errors.Is(err, idemkit.ErrDuplicate) {
		t.Fatalf("the TxMark whose COMMIT lost answered %v; want ErrDuplicate", err)
	}
}
