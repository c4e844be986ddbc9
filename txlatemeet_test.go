package idemkit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
)

// TestTxDuplicateWithinTTLReplaysAfterItsFunction: a Guard.Tx duplicate of a key finished a moment
// before its record's TTL ran out, arriving when the cache no longer held the result (Redis lost
// its data, or a release that failed), ran its function (the cache vouched for the key) and met the
// record only when writing its own. Judged at the write, after a function that outlasted the rest of
// the TTL, the finished record counted no more and was taken over: the business committed a second
// time, where the same duplicate with the result cached, or read before the function, was answered
// with the original. A finished record that counted when the call began answers it.
func TestTxDuplicateWithinTTLReplaysAfterItsFunction(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Minute
	clk := idemtest.NewClock()
	s := memory.NewStore()
	guard := func() *idemkit.Guard {
		g, err := idemkit.New(s, &idemkit.Options{Locker: memory.NewLocker(&memory.LockerOptions{Now: clk.Now}), Lease: 10 * time.Second, TTL: ttl, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	call := idemkit.Call{Scope: "s", Key: "k", Fingerprint: "f"}
	if _, err := guard().Tx(ctx, s, call, func(context.Context, idemkit.TxStore) ([]byte, error) { return []byte("first"), nil }); err != nil {
		t.Fatal(err)
	}
	clk.Advance(ttl - time.Second)
	g := guard() // a Redis that lost its data: the cache does not hold the result
	res, err := g.Tx(ctx, s, call, func(context.Context, idemkit.TxStore) ([]byte, error) {
		clk.Advance(2 * time.Second) // outlasts what was left of the record's TTL
		return []byte("second"), nil
	})
	if err != nil || !res.Replayed || string(res.Value) != "first" {
		t.Errorf("duplicate within TTL: %+v, %v; want first replayed (its writes rolled back)", res, err)
	}
	rec, err := g.Get(ctx, "s", "k")
	if err != nil || string(rec.Response) != "first" || rec.Fence != 1 {
		t.Errorf("record: %+v, %v; want the first outcome, fence 1", rec, err)
	}

	// DoTx in a transaction that cannot read before the function (no Peeker) meets the record the same way.
	call.Key = "dotx"
	tx, err := s.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.DoTx(ctx, tx, call, func(context.Context) ([]byte, error) { return []byte("first"), nil }); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(ttl - time.Second)
	if tx, err = s.BeginTx(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err = g.DoTx(ctx, struct{ idemkit.Store }{tx}, call, func(context.Context) ([]byte, error) {
		clk.Advance(2 * time.Second)
		return []byte("second"), nil
	})
	if !errors.Is(err, idemkit.ErrRollbackReplayed) || !res.Replayed || string(res.Value) != "first" {
		t.Fatalf("DoTx duplicate within TTL: %+v, %v; want first replayed with ErrRollbackReplayed", res, err)
	}
}
