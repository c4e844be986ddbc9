package idemkit_test

import (
	"context"
	"errors"
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
