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

// runTxMark drives [idemkit.Guard.TxMark] over a Store that begins transactions: the mark commits with
// the function's run or not at all, duplicates never run, failures leave the key free.
func runTxMark(t *testing.T, newStore NewStore) {
	skipWithoutTx(t, newStore)
	setup := func(t *testing.T) (*idemkit.Guard, *countingTx, *Clock) {
		s := newStore(t)
		clk := NewClock()
		return guardFor(t, s, clk, nil), &countingTx{TxBeginner: s.(idemkit.TxBeginner)}, clk
	}
	call := idemkit.Call{Scope: "POST /stock", Key: "key-1"}
	markFn := func(c *counter) idemkit.TxMarkFunc {
		return func(ctx context.Context, _ idemkit.TxStore) error { _, err := c.fn(ctx); return err }
	}
	wantNone := func(t *testing.T, g *idemkit.Guard, why string) {
		t.Helper()
		if _, err := g.Get(ctxb, call.Scope, call.Key); !errors.Is(err, idemkit.ErrNotFound) {
			t.Fatalf("%s left a record: %v", why, err)
		}
	}

	t.Run("NewKeyRunsOnceThenDuplicate", func(t *testing.T) {
		g, db, _ := setup(t)
		c := &counter{}
		var fence int64
		must(t, g.TxMark(ctxb, db, call, func(ctx context.Context, _ idemkit.TxStore) error {
			fence, _ = idemkit.FenceFromContext(ctx)
			return markFn(c)(ctx, nil)
		}))
		for range 2 {
			if err := g.TxMark(ctxb, db, call, markFn(c)); !errors.Is(err, idemkit.ErrDuplicate) {
				t.Fatalf("duplicate: %v, want ErrDuplicate", err)
			}
		}
		c.want(t, 1)
		if n := db.commits.Load(); n != 1 || fence != 1 {
			t.Fatalf("%d commits, fence %d in the context; want 1 and 1", n, fence)
		}
		wantStatus(t, g, call, idemkit.StatusSucceeded, 1)
	})

	t.Run("FailureLeavesTheKeyFree", func(t *testing.T) {
		for _, boom := range []error{errors.New("timeout"), idemkit.Permanent(errors.New("out of stock"))} {
			g, db, _ := setup(t)
			c := &counter{err: boom}
			if err := g.TxMark(ctxb, db, call, markFn(c)); !errors.Is(err, boom) {
				t.Fatalf("failing call: %v, want %v", err, boom)
			}
			if db.commits.Load() != 0 {
				t.Fatal("the failed function's transaction committed")
			}
			wantNone(t, g, fmt.Sprintf("a failure (%v)", boom))
			c.err = nil
			must(t, g.TxMark(ctxb, db, call, markFn(c)))
			c.want(t, 2)
			wantStatus(t, g, call, idemkit.StatusSucceeded, 1)
		}
	})

	t.Run("PanicRollsBack", func(t *testing.T) {
		g, db, _ := setup(t)
		func() {
			defer func() {
				if r := recover(); r != "kaboom" {
					t.Fatalf("recovered %v", r)
				}
			}()
			_ = g.TxMark(ctxb, db, call, func(context.Context, idemkit.TxStore) error { panic("kaboom") })
		}()
		wantNone(t, g, "a panic")
		must(t, g.TxMark(ctxb, db, call, markFn(&counter{})))
	})

	t.Run("CallerLeftMidFunction", func(t *testing.T) {
		// The transaction is bound to the call's context, as a database/sql one is: once the caller
		// left, nothing commits, the call fails, and the key is free for the caller's retry.
		g, db, _ := setup(t)
		ctx, leave := context.WithCancel(ctxb)
		err := g.TxMark(ctx, db, call, func(context.Context, idemkit.TxStore) error {
			leave()
			return nil
		})
		if err == nil {
			t.Fatal("the caller left while the function ran, and TxMark reported success")
		}
		if db.commits.Load() != 0 {
			t.Fatal("the transaction of a caller that left committed")
		}
		wantNone(t, g, "a caller that left")
		c := &counter{}
		must(t, g.TxMark(ctxb, db, call, markFn(c)))
		c.want(t, 1)
	})

	t.Run("InFlightTakeoverAndMismatch", func(t *testing.T) {
		g, db, clk := setup(t)
		a := call
		a.Fingerprint = "fp-a"
		cl, _, err := g.Begin(ctxb, a)
		must(t, err)
		c := &counter{}
		if err := g.TxMark(ctxb, db, a, markFn(c)); !errors.Is(err, idemkit.ErrInFlight) {
			t.Fatalf("over a live claim: %v", err)
		}
		b := call
		b.Fingerprint = "fp-b"
		if err := g.TxMark(ctxb, db, b, markFn(c)); !errors.Is(err, idemkit.ErrPayloadMismatch) {
			t.Fatalf("other payload: %v", err)
		}
		c.want(t, 0)
		clk.Advance(lease + time.Second)
		var seen int64
		must(t, g.TxMark(ctxb, db, a, func(ctx context.Context, _ idemkit.TxStore) error {
			seen, _ = idemkit.FenceFromContext(ctx)
			return nil
		}))
		if seen != 2 {
			t.Fatalf("takeover ran at fence %d, want 2", seen)
		}
		if _, err := cl.Finish(ctxb, []byte("stale"), nil); !errors.Is(err, idemkit.ErrFenced) {
			t.Fatalf("stale finish: %v", err)
		}
		wantStatus(t, g, call, idemkit.StatusSucceeded, 2)
		if err := g.TxMark(ctxb, db, a, markFn(c)); !errors.Is(err, idemkit.ErrDuplicate) {
			t.Fatalf("after the takeover: %v, want ErrDuplicate", err)
		}
	})

	t.Run("Storm", func(t *testing.T) {
		// Concurrent duplicates, no Locker: one run and one commit per key; every other caller gets
		// ErrDuplicate or ErrInFlight.
		g, db, _ := setup(t)
		const keys, perKey = 8, 8
		var runs [keys]atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range keys * perKey {
			wg.Go(func() {
				<-start
				k := i % keys
				err := g.TxMark(ctxb, db, idemkit.Call{Scope: "storm", Key: fmt.Sprintf("k%d", k)},
					func(context.Context, idemkit.TxStore) error {
						runs[k].Add(1)
						time.Sleep(time.Millisecond)
						return nil
					})
				if err != nil && !errors.Is(err, idemkit.ErrDuplicate) && !errors.Is(err, idemkit.ErrInFlight) {
					t.Errorf("key %d: %v", k, err)
				}
			})
		}
		close(start)
		wg.Wait()
		for k := range keys {
			if n := runs[k].Load(); n != 1 {
				t.Errorf("key %d ran %d times, want 1", k, n)
			}
		}
		if n := db.commits.Load(); n != keys {
			t.Fatalf("%d commits for %d keys; want one each", n, keys)
		}
	})
}
