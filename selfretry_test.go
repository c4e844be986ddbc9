package idemkit_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/memory"
)

// selfRetryingStore is a third-party Store that retries a write whose reply was lost, once armed:
// the write landed, its retry meets it and answers as for another's record — ErrExists for an
// Insert, ErrFenced for a takeover's Update — although the record is the call's own claim.
type selfRetryingStore struct {
	idemkit.Store
	armed, armedTakeover atomic.Bool
}

func (s *selfRetryingStore) Insert(ctx context.Context, rec *idemkit.Record) error {
	return selfRetriedInsert(ctx, s.Store, rec, &s.armed)
}

func (s *selfRetryingStore) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	err := s.Store.Update(ctx, rec, prev)
	if err == nil && rec.Fence != prev.Fence && s.armedTakeover.CompareAndSwap(true, false) {
		// The retry of the UPDATE finds the record at the new version: fenced.
		return fmt.Errorf("%w: record moved on (retried after a lost reply)", idemkit.ErrFenced)
	}
	return err
}

// selfRetriedInsert inserts rec into st and, when armed, answers as the Insert's own retry would after
// its first reply was lost: ErrExists.
func selfRetriedInsert(ctx context.Context, st idemkit.Store, rec *idemkit.Record, armed *atomic.Bool) error {
	err := st.Insert(ctx, rec)
	if err == nil && armed.CompareAndSwap(true, false) {
		return fmt.Errorf("%w (retried after a lost reply)", idemkit.ErrExists)
	}
	return err
}

// selfRetryingTxStore is selfRetryingStore's transactions: an Insert in the transaction is retried
// the same way (the retry meets the row the transaction wrote).
type selfRetryingTxStore struct {
	idemkit.TxBeginner
	armed atomic.Bool
}

func (s *selfRetryingTxStore) BeginTx(ctx context.Context) (idemkit.TxStore, error) {
	tx, err := s.TxBeginner.BeginTx(ctx)
	if err != nil {
		return nil, err
	}
	return &selfRetryingTx{TxStore: tx, armed: &s.armed}, nil
}

type selfRetryingTx struct {
	idemkit.TxStore
	armed *atomic.Bool
}

func (t *selfRetryingTx) Insert(ctx context.Context, rec *idemkit.Record) error {
	return selfRetriedInsert(ctx, t.TxStore, rec, t.armed)
}

// TestStoreRetryingItsOwnWriteIsNotADuplicate: a Store (not record.Store) that retries an INSERT
// whose reply was lost answers ErrExists for the call's own claim; record.Store checks such a
// conflict against the claim's owner token, the Guard did not: it read the record, judged it as
// another attempt's and answered the call as a duplicate of itself — Mark ErrDuplicate for a
// function that never ran (the mark then standing for its TTL), Do ErrInFlight until the lease ran
// out, Tx a replay of its own record with its writes rolled back. A takeover's UPDATE retried the
// same way (ErrFenced) ended there too. The read that follows the conflict tells: a record carrying
// the call's version (its owner token is the attempt's) is its own claim, and the call goes on.
func TestStoreRetryingItsOwnWriteIsNotADuplicate(t *testing.T) {
	for name, base := range lateClaimStores(t) {
		for _, c := range []struct{ mode, write string }{{"Mark", "insert"}, {"Do", "insert"}, {"Mark", "takeover"}, {"Do", "takeover"}} {
			t.Run(name+"/"+c.mode+"/"+c.write, func(t *testing.T) {
				st := &selfRetryingStore{Store: base}
				g, err := idemkit.New(st, nil)
				if err != nil {
					t.Fatal(err)
				}
				call := idemkit.Call{Scope: "s", Key: testsvc.Name("selfretry-")}
				var runs atomic.Int32
				run := func(fail error) (idemkit.Result, error) {
					if c.mode == "Mark" {
						err := g.Mark(ctxb, call, func(context.Context) error { runs.Add(1); return fail })
						return idemkit.Result{}, err
					}
					return g.Do(ctxb, call, func(context.Context) ([]byte, error) { runs.Add(1); return []byte("v"), fail })
				}
				if c.write == "takeover" {
					if _, err := run(errUpstream); !errors.Is(err, errUpstream) {
						t.Fatal(err)
					}
					runs.Store(0)
					st.armedTakeover.Store(true)
				} else {
					st.armed.Store(true)
				}
				res, err := run(nil)
				if err != nil || runs.Load() != 1 || c.mode == "Do" && (res.Replayed || string(res.Value) != "v") {
					rec, gerr := g.Get(ctxb, call.Scope, call.Key)
					t.Fatalf("call whose Store retried its claim: %+v, %v after %d runs (record %+v, %v); want the function run once", res, err, runs.Load(), rec, gerr)
				}
				if _, err := run(nil); runs.Load() != 1 || c.mode == "Mark" && !errors.Is(err, idemkit.ErrDuplicate) || c.mode == "Do" && err != nil {
					t.Fatalf("duplicate: %v after %d runs, want the first answer", err, runs.Load())
				}
			})
		}
	}

	t.Run("memory/Tx/insert", func(t *testing.T) {
		db := &selfRetryingTxStore{TxBeginner: memory.NewStore()}
		g, err := idemkit.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		call := idemkit.Call{Scope: "s", Key: testsvc.Name("selfretry-tx-")}
		var runs atomic.Int32
		run := func() (idemkit.Result, error) {
			return g.Tx(ctxb, db, call, func(context.Context, idemkit.TxStore) ([]byte, error) { runs.Add(1); return []byte("v"), nil })
		}
		db.armed.Store(true)
		res, err := run()
		if err != nil || res.Replayed || string(res.Value) != "v" || runs.Load() != 1 {
			rec, gerr := g.Get(ctxb, call.Scope, call.Key)
			t.Fatalf("Tx whose Store retried its record's INSERT: %+v, %v after %d runs (record %+v, %v); want the function's own answer", res, err, runs.Load(), rec, gerr)
		}
		if res, err := run(); err != nil || !res.Replayed || string(res.Value) != "v" || runs.Load() != 1 {
			t.Fatalf("duplicate: %+v, %v after %d runs, want the replay", res, err, runs.Load())
		}
	})
}
