package idemkit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// conflictingStore is a memory Store whose first `conflicts` transactions have their first Insert
// rolled back by "the database" on a write conflict, as InnoDB does to duplicates that waited on a mark
// whose transaction rolled back.
type conflictingStore struct {
	*memory.Store
	mu        sync.Mutex
	conflicts int
}

func (s *conflictingStore) BeginTx(ctx context.Context) (idemkit.TxStore, error) {
	tx, err := s.Store.BeginTx(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conflicts == 0 {
		return tx, nil
	}
	s.conflicts--
	return conflictingTx{tx}, nil
}

type conflictingTx struct{ idemkit.TxStore }

func (conflictingTx) Insert(context.Context, *idemkit.Record) error {
	return fmt.Errorf("Deadlock found when trying to get lock: %w", idemkit.ErrConflict)
}

// TestTxMarkConflictIsOneCall: a TxMark whose transaction the database rolled back on a write conflict
// before the mark, run again and done, is one call: the Observer sees it start and end once, executed,
// and no store outage is logged. Each run was a call of its own: an "unavailable" event (and a warning)
// for the conflict, then the run that marked the key, so the calls and outage metrics counted a call
// and an outage that never were (found by a defect hunt).
func TestTxMarkConflictIsOneCall(t *testing.T) {
	for _, locker := range []bool{false, true} {
		s := &conflictingStore{Store: memory.NewStore(), conflicts: 2}
		obs := &eventRecorder{}
		var starts int
		opts := &idemkit.Options{Observer: startCounter{obs, &starts}}
		if locker {
			opts.Locker = memory.NewLocker(nil)
		}
		g, err := idemkit.New(s, opts)
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		err = g.TxMark(ctxb, s, idemkit.Call{Scope: "s", Key: "k"}, func(context.Context, idemkit.TxStore) error {
			runs++
			return nil
		})
		if err != nil || runs != 1 {
			t.Fatalf("Locker %v: %v after %d runs", locker, err, runs)
		}
		if starts != 1 || len(obs.events) != 1 || obs.events[0].Outcome != idemkit.OutcomeExecuted || obs.events[0].Err != nil {
			t.Errorf("Locker %v: one call, %d starts and events %+v; want one executed", locker, starts, obs.events)
		}
		if rec, err := g.Get(ctxb, "s", "k"); err != nil || !rec.IsMark() {
			t.Fatalf("Locker %v: record %+v, %v", locker, rec, err)
		}
	}

	// Past the reruns, the conflict is the call's answer, reported once.
	s := &conflictingStore{Store: memory.NewStore(), conflicts: 100}
	obs := &eventRecorder{}
	var starts int
	g, err := idemkit.New(s, &idemkit.Options{Observer: startCounter{obs, &starts}})
	if err != nil {
		t.Fatal(err)
	}
	err = g.TxMark(ctxb, s, idemkit.Call{Scope: "s", Key: "k"}, func(context.Context, idemkit.TxStore) error { return nil })
	// No store outage: a retryable failure matching ErrConflict (TestMarkTxClaimWriteConflictIsNotAnOutage).
	if !errors.Is(err, idemkit.ErrConflict) || errors.Is(err, idemkit.ErrStoreUnavailable) || !idemkit.IsRetryable(err) {
		t.Fatalf("conflicts every time: %v", err)
	}
	if starts != 1 || len(obs.events) != 1 || obs.events[0].Outcome != idemkit.OutcomeInFlight {
		t.Errorf("conflicts every time: %d starts, events %+v; want one in flight", starts, obs.events)
	}
	if s.conflicts != 100-4 {
		t.Errorf("%d runs of the transaction, want 4", 100-s.conflicts)
	}
}

// startCounter counts the calls an Observer sees start.
type startCounter struct {
	*eventRecorder
	n *int
}

func (c startCounter) Start(ctx context.Context, m idemkit.Mode, scope string) (context.Context, func(*idemkit.Event)) {
	*c.n++
	return c.eventRecorder.Start(ctx, m, scope)
}
