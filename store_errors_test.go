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

// stallingStore is a record store whose finish (Update) hangs until its context ends and then
// returns the context's error, as a database/sql driver does when the server does not answer.
type stallingStore struct{ *memory.Store }

func (s stallingStore) Update(ctx context.Context, r *idemkit.Record, prev idemkit.Version) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestFinishTimeoutIsStoreUnavailable: when the store does not answer the finish within
// FinishTimeout, Do's caller (whose own context is alive) gets a bare context.DeadlineExceeded,
// not ErrStoreUnavailable as Finish documents for a write that failed.
func TestFinishTimeoutIsStoreUnavailable(t *testing.T) {
	g, err := idemkit.New(stallingStore{memory.NewStore()}, &idemkit.Options{FinishTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background()) // a request's context, never cancelled here
	defer cancel()
	_, err = g.Do(ctx, idemkit.Call{Scope: "pay", Key: "k"}, func(context.Context) ([]byte, error) { return []byte("ok"), nil })
	if ctx.Err() != nil {
		t.Fatal("the caller's context ended")
	}
	if !errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("Do: %v (context.DeadlineExceeded: %v), want ErrStoreUnavailable: the store did not record the outcome", err, errors.Is(err, context.DeadlineExceeded))
	}
}

// sizeLimitedStore refuses, on Update only, a response longer than 4 bytes (a store that checks a
// record's values after its key, as a unique index is met before a column's size).
type sizeLimitedStore struct{ *memory.Store }

func (s sizeLimitedStore) Update(ctx context.Context, r *idemkit.Record, prev idemkit.Version) error {
	if len(r.Response) > 4 {
		return fmt.Errorf("test: %w: response too large", idemkit.ErrUnstorable)
	}
	return s.Store.Update(ctx, r, prev)
}

// TestTakeoverOfUnstorableCallIsInvalid: a retry that takes a FAILED key over with a Call.Result the
// Store refuses is bad input (ErrUnstorable), as on a new key's claim — it was reported as
// ErrStoreUnavailable, an outage to wait out (found by a defect hunt).
func TestTakeoverOfUnstorableCallIsInvalid(t *testing.T) {
	g, err := idemkit.New(sizeLimitedStore{memory.NewStore()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := idemkit.Call{Scope: "pay", Key: "k"}
	if _, err := g.Do(ctx, c, func(context.Context) ([]byte, error) { return nil, errors.New("retry me") }); err == nil {
		t.Fatal("first attempt: want its error")
	}
	c.Result = []byte("far too large")
	_, err = g.Do(ctx, c, func(context.Context) ([]byte, error) { return nil, nil })
	if !errors.Is(err, idemkit.ErrUnstorable) || errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("takeover: %v, want ErrUnstorable and not ErrStoreUnavailable", err)
	}
}

// TestFinishTimeoutAfterBeginContextEnded: Begin's context (a request's) ended before the work
// finished, and Finish is called later on a live context of its own (a background job's). A finish
// the store does not answer within FinishTimeout is ErrStoreUnavailable for that caller, who waits
// for the answer: the error was classified by Begin's ended context and came back as a bare
// context.DeadlineExceeded (found by a defect hunt).
func TestFinishTimeoutAfterBeginContextEnded(t *testing.T) {
	g, err := idemkit.New(stallingStore{memory.NewStore()}, &idemkit.Options{FinishTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reqCtx, cancelReq := context.WithCancel(context.Background())
	cl, _, err := g.Begin(reqCtx, idemkit.Call{Scope: "pay", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	cancelReq() // the request is over; the work goes on in the background
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = cl.Finish(ctx, []byte("ok"), nil)
	if ctx.Err() != nil {
		t.Fatal("Finish's context ended")
	}
	if !errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("Finish: %v (context.DeadlineExceeded: %v), want ErrStoreUnavailable: the store did not record the outcome", err, errors.Is(err, context.DeadlineExceeded))
	}
}
