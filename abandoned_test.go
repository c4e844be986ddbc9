package idemkit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// lateStore lands its first Insert after the caller gave up, as a statement waiting on a row lock
// does once the lock is free: Insert returns the caller's context error, and the record is written a
// moment later.
type lateStore struct {
	idemkit.Store
	late   atomic.Bool
	landed chan struct{}
}

func newLateStore() *lateStore {
	s := &lateStore{Store: memory.NewStore(), landed: make(chan struct{})}
	s.late.Store(true)
	return s
}

func (s *lateStore) Insert(ctx context.Context, rec *idemkit.Record) error {
	if !s.late.CompareAndSwap(true, false) {
		return s.Store.Insert(ctx, rec)
	}
	<-ctx.Done()
	own := *rec
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = s.Store.Insert(context.Background(), &own)
		close(s.landed)
	}()
	return ctx.Err()
}

// TestAbandonedClaimReleased: a claim whose caller left before the Store answered, and which landed
// afterwards, is released: a retry runs the function — Execute mode got "in flight" until the lease
// ran out, and Mark mode ErrDuplicate for good although its function never ran (found by a defect
// hunt, for Execute mode).
func TestAbandonedClaimReleased(t *testing.T) {
	for _, mode := range []string{"execute", "mark"} {
		t.Run(mode, func(t *testing.T) {
			st := newLateStore()
			g, err := idemkit.New(st, &idemkit.Options{Lease: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			call := func(ctx context.Context) error {
				c := idemkit.Call{Scope: "s", Key: "k"}
				if mode == "mark" {
					return g.Mark(ctx, c, func(context.Context) error { runs.Add(1); return nil })
				}
				_, err := g.Do(ctx, c, func(context.Context) ([]byte, error) { runs.Add(1); return []byte("v"), nil })
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
			defer cancel()
			if err := call(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("first call: %v, want its deadline", err)
			}
			<-st.landed
			deadline := time.Now().Add(10 * time.Second) // FinishTimeout bounds the release: 5 s
			for {
				err := call(context.Background())
				if err == nil && runs.Load() == 1 {
					return
				}
				// Until the release, a duplicate meets the claim: in flight, or for a mark (which says
				// SUCCEEDED from its claim on, see Mark) a duplicate.
				if !errors.Is(err, idemkit.ErrInFlight) && !errors.Is(err, idemkit.ErrDuplicate) || time.Now().After(deadline) {
					t.Fatalf("retry: %v, function ran %d times; want it run once", err, runs.Load())
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
