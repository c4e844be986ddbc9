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

// lateUpdateStore lands one Update, once armed, after the caller gave up, as a statement waiting on a
// row lock does once the lock is free: Update returns the caller's context error, and the record is
// written a moment later.
type lateUpdateStore struct {
	idemkit.Store
	late   atomic.Bool
	landed chan struct{}
}

func (s *lateUpdateStore) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	if !s.late.CompareAndSwap(true, false) {
		return s.Store.Update(ctx, rec, prev)
	}
	<-ctx.Done()
	own := *rec
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = s.Store.Update(context.Background(), &own, prev)
		close(s.landed)
	}()
	return ctx.Err()
}

// TestMarkAbandonedTakeoverKeepsFences: a Mark-mode retry takes a FAILED mark over at the next fence,
// so that writes the failed attempt conditioned on its fence do not refuse the retry's. When the
// takeover's caller left before the Store answered and the takeover landed afterwards, the released
// mark was deleted, and the next attempt claimed the key afresh at fence 1 — no greater than the
// failed attempt's, whose fenced writes then refuse it. It is finished FAILED instead, as a claim is,
// and the next attempt gets the fence after both (found by a defect hunt).
func TestMarkAbandonedTakeoverKeepsFences(t *testing.T) {
	st := &lateUpdateStore{Store: memory.NewStore(), landed: make(chan struct{})}
	g, err := idemkit.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "s", Key: "k"}
	var fences []int64
	mark := func(ctx context.Context, fail bool) error {
		return g.Mark(ctx, call, func(ctx context.Context) error {
			f, _ := idemkit.FenceFromContext(ctx)
			fences = append(fences, f)
			if fail {
				return errors.New("the payment service timed out")
			}
			return nil
		})
	}
	if err := mark(context.Background(), true); err == nil || idemkit.IsPermanent(err) {
		t.Fatalf("first attempt: %v, want its retryable error", err)
	}
	// The second attempt's caller leaves while its takeover's Update waits. Its deadline must end
	// there: one that ran out before (a loaded machine can take longer than 10 ms to get there) ended
	// the attempt before its Update, which then never landed, and the test waited for it forever. Such
	// an attempt wrote nothing: it is made again with a longer deadline.
	for wait := 10 * time.Millisecond; ; wait *= 2 {
		st.late.Store(true) // the next Update is the second attempt's takeover of the FAILED mark
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		err := mark(ctx, false)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("second attempt: %v, want its deadline", err)
		}
		if !st.late.Load() {
			break // its Update was under way: it lands late
		}
		if wait > 5*time.Second {
			t.Fatalf("the second attempt never reached its takeover's Update within its deadline (%s)", wait)
		}
	}
	<-st.landed
	deadline := time.Now().Add(10 * time.Second) // FinishTimeout bounds the release: 5 s
	for {
		err := mark(context.Background(), false)
		if err == nil {
			break
		}
		if !errors.Is(err, idemkit.ErrDuplicate) || time.Now().After(deadline) {
			t.Fatalf("retry: %v; want it run once the abandoned takeover is released", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(fences) != 2 || fences[0] != 1 || fences[1] != 3 {
		t.Fatalf("fences of the attempts that ran %v, want [1 3]: the retry's fence must be greater than every earlier claim's (1, and the abandoned takeover's 2)", fences)
	}
}
