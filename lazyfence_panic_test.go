package idemkit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// endedTxs begins memory transactions that refuse reads once they ended.
type endedTxs struct{ *memory.Store }

func (s endedTxs) BeginTx(ctx context.Context) (idemkit.TxStore, error) {
	tx, err := s.Store.BeginTx(ctx)
	return &endedTx{TxStore: tx}, err
}

type endedTx struct {
	idemkit.TxStore
	ended atomic.Bool
}

func (t *endedTx) Rollback() error { t.ended.Store(true); return t.TxStore.Rollback() }
func (t *endedTx) Commit() error   { t.ended.Store(true); return t.TxStore.Commit() }
func (t *endedTx) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	if t.ended.Load() {
		return nil, errors.New("read through a transaction that ended")
	}
	return t.TxStore.Get(ctx, scope, key)
}

// TestLazyFenceAfterPanicReadsNothing: a goroutine of a Tx-mode function that panicked, asking for
// the fence after the panic, must not read through the transaction the panic rolled back (with the
// memory store that read raced the rollback). It gets the fence without a read.
func TestLazyFenceAfterPanicReadsNothing(t *testing.T) {
	st := endedTxs{memory.NewStore()}
	g, err := idemkit.New(st, &idemkit.Options{Locker: memory.NewLocker(nil)})
	if err != nil {
		t.Fatal(err)
	}
	ask, asked := make(chan struct{}), make(chan int64)
	call := idemkit.Call{Scope: "s", Key: "panics"}
	func() {
		defer func() { _ = recover() }()
		_, _ = g.Tx(ctxb, st, call, func(ctx context.Context, tx idemkit.TxStore) ([]byte, error) {
			go func() {
				<-ask
				if f, ok := idemkit.FenceFromContext(ctx); ok {
					asked <- f
				} else {
					asked <- -1
				}
			}()
			panic("boom")
		})
	}()
	close(ask)
	if f := <-asked; f != 1 {
		t.Fatalf("fence asked after the panic: %d (-1: none), want 1 (a new key's, without a read)", f)
	}
	res, err := g.Tx(ctxb, st, call, func(ctx context.Context, tx idemkit.TxStore) ([]byte, error) { return []byte("ran"), nil })
	if err != nil || res.Replayed || string(res.Value) != "ran" {
		t.Fatalf("retry after the panic: %+v, %v; want the function to run", res, err)
	}
}
