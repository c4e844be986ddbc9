package idemtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// runTxContract checks the Store contract inside a transaction ([idemkit.TxBeginner]): its Insert
// never overwrites, its Update and Delete compare against the latest committed record (the Guard
// reads the record before the transaction and writes over that version in it, so a write that
// ignored a version moved on meanwhile would commit a second run of the function), it reads its own
// writes, Rollback discards them and Commit applies them.
func runTxContract(t *testing.T, newStore NewStore) {
	skipWithoutTx(t, newStore)
	now := contractNow()
	begin := func(t *testing.T, s idemkit.Store) idemkit.TxStore {
		t.Helper()
		tx, err := s.(idemkit.TxBeginner).BeginTx(ctxb)
		must(t, err)
		t.Cleanup(func() { _ = tx.Rollback() }) // after a failed check: the Store must not stay locked
		return tx
	}
	get := func(t *testing.T, s idemkit.Store, key string) *idemkit.Record {
		t.Helper()
		got, err := s.Get(ctxb, "s", key)
		must(t, err)
		return got
	}

	t.Run("StaleVersionFenced", func(t *testing.T) {
		s := newStore(t)
		rec := sample(now, "s", "k")
		must(t, s.Insert(ctxb, rec))
		// Taken over outside the transaction, after rec was read.
		taken := *rec
		taken.Fence, taken.Owner, taken.UpdatedAt = 2, "owner-2", now.Add(time.Second)
		must(t, s.Update(ctxb, &taken, rec.Version()))

		tx := begin(t, s)
		next := *rec
		next.Status, next.Response, next.Error = idemkit.StatusSucceeded, []byte("done"), ""
		wantErr(t, tx.Update(ctxb, &next, rec.Version()), idemkit.ErrFenced)
		wantErr(t, tx.Delete(ctxb, "s", "k", rec.Version()), idemkit.ErrFenced)
		dup := sample(now, "s", "k")
		dup.Owner, dup.Response = "intruder", []byte("other")
		wantErr(t, tx.Insert(ctxb, dup), idemkit.ErrExists)
		RequireSameRecord(t, &taken, get(t, tx, "k"))

		mine := taken
		mine.Status, mine.Response, mine.Error = idemkit.StatusSucceeded, []byte("mine"), ""
		must(t, tx.Update(ctxb, &mine, taken.Version()))
		RequireSameRecord(t, &mine, get(t, tx, "k"))
		must(t, tx.Rollback())
		RequireSameRecord(t, &taken, get(t, s, "k"))
	})

	t.Run("Peek", func(t *testing.T) { runTxPeek(t, newStore) })

	t.Run("CommitApplies", func(t *testing.T) {
		s := newStore(t)
		rec := sample(now, "s", "k")
		must(t, s.Insert(ctxb, rec))
		tx := begin(t, s)
		fresh := sample(now, "s", "new")
		must(t, tx.Insert(ctxb, fresh))
		RequireSameRecord(t, fresh, get(t, tx, "new"))
		wantErr(t, tx.Insert(ctxb, fresh), idemkit.ErrExists)
		next := *rec
		next.Status, next.Response, next.Error = idemkit.StatusSucceeded, []byte("done"), ""
		must(t, tx.Update(ctxb, &next, rec.Version()))
		wantErr(t, tx.Update(ctxb, &next, rec.Version()), idemkit.ErrFenced) // it moved on, in the transaction
		// Outside, nothing of it shows before Commit: a duplicate replaying a result the transaction
		// then fails to commit would answer for work that never happened. A read that waits for the
		// transaction (a Store of one connection) is refused by its deadline instead.
		notYet(t, s, fresh.Key, nil)
		notYet(t, s, rec.Key, rec)
		must(t, tx.Commit())
		RequireSameRecord(t, fresh, get(t, s, "new"))
		RequireSameRecord(t, &next, get(t, s, "k"))

		tx = begin(t, s)
		wantErr(t, tx.Delete(ctxb, "s", "k", rec.Version()), idemkit.ErrFenced)
		must(t, tx.Delete(ctxb, "s", "k", next.Version()))
		_, err := tx.Get(ctxb, "s", "k")
		wantErr(t, err, idemkit.ErrNotFound)
		must(t, tx.Commit())
		_, err = s.Get(ctxb, "s", "k")
		wantErr(t, err, idemkit.ErrNotFound)
	})
}

// runTxPeek checks Peek in a transaction ([idemkit.Peeker], DoTx's read before its function) when the
// Store's transactions implement it: it reads the committed records and the transaction's own writes,
// and never another open transaction's. DoTx answers a duplicate from it: a result read off a
// transaction that then rolled back would be replayed for work that never happened, no record left.
func runTxPeek(t *testing.T, newStore NewStore) {
	now := contractNow()
	s := newStore(t)
	rec := sample(now, "s", "k")
	must(t, s.Insert(ctxb, rec))
	tx, err := s.(idemkit.TxBeginner).BeginTx(ctxb)
	must(t, err)
	defer func() { _ = tx.Rollback() }()
	pk, ok := tx.(idemkit.Peeker)
	if !ok {
		t.Skip("the Store's transactions do not implement idemkit.Peeker")
	}
	got, err := pk.Peek(ctxb, "s", "k")
	must(t, err)
	RequireSameRecord(t, rec, got)
	fresh := sample(now, "s", "new")
	must(t, tx.Insert(ctxb, fresh))
	got, err = pk.Peek(ctxb, "s", "new")
	must(t, err)
	RequireSameRecord(t, fresh, got)

	// Another transaction, while tx is open. A Store of one connection makes its BeginTx wait for
	// tx: nothing can read beside tx then, and there is nothing to check.
	ctx, cancel := context.WithTimeout(ctxb, 500*time.Millisecond)
	defer cancel()
	other, err := s.(idemkit.TxBeginner).BeginTx(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback() }()
	op, ok := other.(idemkit.Peeker)
	if !ok {
		t.Fatalf("a transaction of the Store is a Peeker, another is not (%T)", other)
	}
	got, err = op.Peek(ctx, "s", "new")
	switch {
	case ctx.Err() != nil && err != nil: // waited for tx: no dirty read
	case !errors.Is(err, idemkit.ErrNotFound):
		t.Fatalf("Peek in a transaction of a record another open transaction inserted: %+v, %v; want ErrNotFound (it read uncommitted data)", got, err)
	}
}

// notYet fails t if a read of key outside an open transaction returns anything but want (nil: no
// record), or an error other than ErrNotFound for want nil. A read still waiting for the transaction
// when its deadline passes is no failure.
func notYet(t *testing.T, s idemkit.Store, key string, want *idemkit.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxb, 200*time.Millisecond)
	defer cancel()
	got, err := s.Get(ctx, "s", key)
	switch {
	case ctx.Err() != nil && err != nil:
		return // blocked by the transaction
	case want == nil && !errors.Is(err, idemkit.ErrNotFound):
		t.Fatalf("a record inserted in an open transaction, read outside it: %+v, %v; want ErrNotFound", got, err)
	case want != nil:
		must(t, err)
		RequireSameRecord(t, want, got)
	}
}
