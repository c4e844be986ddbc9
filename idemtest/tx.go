package idemtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// countingTx counts the transactions of a TxBeginner that committed a function's run.
type countingTx struct {
	idemkit.TxBeginner
	commits atomic.Int32
}

func (c *countingTx) BeginTx(ctx context.Context) (idemkit.TxStore, error) {
	tx, err := c.TxBeginner.BeginTx(ctx)
	if err != nil {
		return nil, err
	}
	return c.wrap(tx), nil
}

// BeginTxGet forwards to the Store's [idemkit.BeginGetter], or reads as the Guard would without one.
func (c *countingTx) BeginTxGet(ctx context.Context, scope, key string) (idemkit.TxStore, *idemkit.Record, error) {
	return beginTxGet(ctx, c.TxBeginner, c.wrap, scope, key)
}

func (c *countingTx) wrap(tx idemkit.TxStore) idemkit.TxStore {
	ct := &countedTx{TxStore: tx, c: c}
	return withInsertCommit(ct, tx, func() { c.commits.Add(1) })
}

// beginTxGet is BeginTxGet for a TxBeginner wrapping b: b's own when b is an [idemkit.BeginGetter]
// (the transaction it begins wrapped by wrap), otherwise the read a Guard makes without one.
func beginTxGet(ctx context.Context, b idemkit.TxBeginner, wrap func(idemkit.TxStore) idemkit.TxStore, scope, key string) (idemkit.TxStore, *idemkit.Record, error) {
	bg, ok := b.(idemkit.BeginGetter)
	if !ok {
		rec, err := b.Get(ctx, scope, key)
		return nil, rec, err
	}
	tx, rec, err := bg.BeginTxGet(ctx, scope, key)
	if tx == nil {
		return nil, rec, err
	}
	return wrap(tx), rec, err
}

// withInsertCommit returns w, a wrapper of tx, given InsertCommit when tx has it
// ([idemkit.InsertCommitter]: the Guard then ends the transaction that way), committed being called
// after each one that committed.
func withInsertCommit(w, tx idemkit.TxStore, committed func()) idemkit.TxStore {
	ic, ok := tx.(idemkit.InsertCommitter)
	if !ok {
		return w
	}
	return &insertCommitting{TxStore: w, ic: ic, committed: committed}
}

type insertCommitting struct {
	idemkit.TxStore // the wrapper
	ic              idemkit.InsertCommitter
	committed       func()
}

func (t *insertCommitting) InsertCommit(ctx context.Context, rec *idemkit.Record) error {
	err := t.ic.InsertCommit(ctx, rec)
	if err == nil {
		t.committed()
	}
	return err
}

type countedTx struct {
	idemkit.TxStore
	c *countingTx
}

func (t *countedTx) Commit() error {
	err := t.TxStore.Commit()
	if err == nil {
		t.c.commits.Add(1)
	}
	return err
}

// skipWithoutTx skips t when the Stores newStore makes do not begin transactions.
func skipWithoutTx(t *testing.T, newStore NewStore) {
	t.Helper()
	if _, ok := newStore(t).(idemkit.TxBeginner); !ok {
		t.Skip("the Store does not begin transactions (idemkit.TxBeginner)")
	}
}

// runTxStateTable drives [idemkit.Guard.Tx] over a Store that begins transactions through the rows
// of the state table: the record is written once, with the function's outcome, in the transaction.
func runTxStateTable(t *testing.T, newStore NewStore) {
	skipWithoutTx(t, newStore)
	setup := func(t *testing.T, mod func(*idemkit.Options)) (*idemkit.Guard, *countingTx, *Clock) {
		s := newStore(t)
		clk := NewClock()
		return guardFor(t, s, clk, mod), &countingTx{TxBeginner: s.(idemkit.TxBeginner)}, clk
	}
	call := idemkit.Call{Scope: "POST /orders", Key: "key-1"}
	txfn := func(c *counter) idemkit.TxFunc {
		return func(ctx context.Context, _ idemkit.TxStore) ([]byte, error) { return c.fn(ctx) }
	}

	t.Run("NewKeyRunsOnceThenReplays", func(t *testing.T) {
		g, db, _ := setup(t, nil)
		c := &counter{result: []byte("v")}
		res, err := g.Tx(ctxb, db, call, txfn(c))
		if err != nil || res.Replayed || string(res.Value) != "v" || res.Fence != 1 {
			t.Fatalf("first call: %+v, %v", res, err)
		}
		for range 2 {
			res, err = g.Tx(ctxb, db, call, txfn(c))
			if err != nil || !res.Replayed || string(res.Value) != "v" {
				t.Fatalf("replay: %+v, %v", res, err)
			}
		}
		c.want(t, 1)
		if db.commits.Load() != 1 {
			t.Fatalf("%d commits, want 1", db.commits.Load())
		}
		rec := wantStatus(t, g, call, idemkit.StatusSucceeded, 1)
		if rec.Owner == "" || rec.ExpiresAt.IsZero() {
			t.Fatalf("stored %+v", rec)
		}
	})

	t.Run("RetryableErrorLeavesNothing", func(t *testing.T) {
		g, db, _ := setup(t, nil)
		boom := errors.New("timeout")
		c := &counter{err: boom}
		if _, err := g.Tx(ctxb, db, call, txfn(c)); !errors.Is(err, boom) {
			t.Fatalf("first call: %v", err)
		}
		if _, err := g.Get(ctxb, call.Scope, call.Key); !errors.Is(err, idemkit.ErrNotFound) {
			t.Fatalf("a retryable failure left a record: %v", err)
		}
		c.err, c.result = nil, []byte("ok")
		if res, err := g.Tx(ctxb, db, call, txfn(c)); err != nil || res.Replayed || res.Fence != 1 {
			t.Fatalf("retry: %+v, %v", res, err)
		}
		c.want(t, 2)
	})

	t.Run("PermanentErrorIsStoredAndReplayed", func(t *testing.T) {
		g, db, _ := setup(t, nil)
		c := &counter{result: []byte("why"), err: idemkit.Permanent(errors.New("insufficient funds"))}
		if _, err := g.Tx(ctxb, db, call, txfn(c)); !idemkit.IsPermanent(err) {
			t.Fatalf("first call: %v", err)
		}
		if db.commits.Load() != 0 {
			t.Fatal("the failed function's transaction committed")
		}
		res, err := g.Tx(ctxb, db, call, txfn(c))
		var rej *idemkit.RejectedError
		if !errors.As(err, &rej) || rej.Message != "insufficient funds" || !res.Replayed || string(res.Value) != "why" {
			t.Fatalf("replay: %+v, %v", res, err)
		}
		c.want(t, 1)
		wantStatus(t, g, call, idemkit.StatusRejected, 1)
	})

	t.Run("InFlightAndTakeover", func(t *testing.T) {
		g, db, clk := setup(t, nil)
		cl, _, err := g.Begin(ctxb, call)
		must(t, err)
		c := &counter{result: []byte("v")}
		if _, err := g.Tx(ctxb, db, call, txfn(c)); !errors.Is(err, idemkit.ErrInFlight) {
			t.Fatalf("over a live claim: %v", err)
		}
		c.want(t, 0)
		clk.Advance(lease + time.Second)
		var seen int64
		res, err := g.Tx(ctxb, db, call, func(ctx context.Context, _ idemkit.TxStore) ([]byte, error) {
			seen, _ = idemkit.FenceFromContext(ctx)
			return []byte("taker"), nil
		})
		if err != nil || res.Fence != 2 || seen != 2 {
			t.Fatalf("takeover: %+v (fence in context %d), %v; want fence 2", res, seen, err)
		}
		if _, err := cl.Finish(ctxb, []byte("stale"), nil); !errors.Is(err, idemkit.ErrFenced) {
			t.Fatalf("stale finish: %v", err)
		}
		wantStatus(t, g, call, idemkit.StatusSucceeded, 2)
	})

	t.Run("PayloadMismatchAndExpiry", func(t *testing.T) {
		g, db, clk := setup(t, nil)
		a := call
		a.Fingerprint = "fp-a"
		c := &counter{result: []byte("v")}
		_, err := g.Tx(ctxb, db, a, txfn(c))
		must(t, err)
		b := call
		b.Fingerprint = "fp-b"
		if _, err := g.Tx(ctxb, db, b, txfn(c)); !errors.Is(err, idemkit.ErrPayloadMismatch) {
			t.Fatalf("other payload: %v", err)
		}
		clk.Advance(time.Hour)
		if res, err := g.Tx(ctxb, db, b, txfn(c)); err != nil || res.Replayed || res.Fence != 2 {
			t.Fatalf("after expiry: %+v, %v; want a fresh run at fence 2", res, err)
		}
		c.want(t, 2)
	})

	t.Run("PanicRollsBack", func(t *testing.T) {
		g, db, _ := setup(t, nil)
		func() {
			defer func() {
				if r := recover(); r != "kaboom" {
					t.Fatalf("recovered %v", r)
				}
			}()
			_, _ = g.Tx(ctxb, db, call, func(context.Context, idemkit.TxStore) ([]byte, error) { panic("kaboom") })
		}()
		if _, err := g.Get(ctxb, call.Scope, call.Key); !errors.Is(err, idemkit.ErrNotFound) {
			t.Fatalf("a panic left a record: %v", err)
		}
		if res, err := g.Tx(ctxb, db, call, txfn(&counter{result: []byte("v")})); err != nil || res.Replayed {
			t.Fatalf("after a panic: %+v, %v", res, err)
		}
	})

	t.Run("Storm", func(t *testing.T) {
		// Concurrent duplicates, no Locker: whatever runs, one transaction commits per key, and every
		// caller gets its result or ErrInFlight.
		g, db, _ := setup(t, nil)
		const keys, perKey = 8, 8
		var runs [keys]atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range keys * perKey {
			wg.Go(func() {
				<-start
				k := i % keys
				res, err := g.Tx(ctxb, db, idemkit.Call{Scope: "storm", Key: fmt.Sprintf("k%d", k)},
					func(context.Context, idemkit.TxStore) ([]byte, error) {
						runs[k].Add(1)
						time.Sleep(time.Millisecond)
						return fmt.Appendf(nil, "v%d", k), nil
					})
				if err != nil && !errors.Is(err, idemkit.ErrInFlight) || err == nil && string(res.Value) != fmt.Sprintf("v%d", k) {
					t.Errorf("key %d: %+v, %v", k, res, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := db.commits.Load(); n != keys {
			t.Fatalf("%d commits for %d keys; want one each", n, keys)
		}
	})
}
