package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestInsertOfACallerThatLeftIsNotSent: an Insert whose context ended before the record was written
// (at once, or while it waited for a transaction holding the key) never takes effect, and says so
// with an error matching idemkit.ErrNotSent, as record.Store's does. It returned the context's error
// alone, so the Guard watched for a claim that could never land, for the claim's whole lease (30s by
// default): Guard.Wait, after a call whose caller had left, waited that long on the memory Store
// where it returns at once on record.Store.
func TestInsertOfACallerThatLeftIsNotSent(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	rec := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusProcessing, Fence: 1, Owner: "o",
		LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}
	left, leave := context.WithCancel(context.Background())
	leave()

	t.Run("Store", func(t *testing.T) {
		s := memory.NewStore()
		err := s.Insert(left, rec)
		if !errors.Is(err, idemkit.ErrNotSent) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Insert on a context that ended: %v; want an error matching ErrNotSent and context.Canceled", err)
		}
		// Waiting for a transaction holding the key.
		tx, err := s.BeginTx(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.Get(context.Background(), "s", "k"); !errors.Is(err, idemkit.ErrNotFound) {
			t.Fatal(err)
		}
		waited, stop := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer stop()
		err = s.Insert(waited, rec)
		if !errors.Is(err, idemkit.ErrNotSent) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Insert whose context ended while it waited for the key's transaction: %v; want an error matching ErrNotSent and context.DeadlineExceeded", err)
		}
		if _, err := s.Get(context.Background(), "s", "k"); !errors.Is(err, idemkit.ErrNotFound) {
			t.Fatalf("after an Insert not sent: %v, want no record", err)
		}
	})

	t.Run("Guard", func(t *testing.T) {
		for _, mark := range []bool{false, true} {
			g, err := idemkit.New(memory.NewStore(), nil) // no Locker: the claim is the first write
			if err != nil {
				t.Fatal(err)
			}
			call := idemkit.Call{Scope: "s", Key: "k"}
			if mark {
				err = g.Mark(left, call, func(context.Context) error { return nil })
			} else {
				_, err = g.Do(left, call, func(context.Context) ([]byte, error) { return nil, nil })
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("call of a caller that left (mark %t): %v", mark, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = g.Wait(ctx)
			cancel()
			if err != nil {
				t.Fatalf("Guard.Wait after a call whose caller left before its claim (mark %t): %v; want nil: nothing can land", mark, err)
			}
		}
	})
}
