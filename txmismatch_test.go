package idemkit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// snapshotTx is a memory transaction whose unlocked read (Peek) predates a record another attempt
// committed: DoTx meets that record only after its function.
type snapshotTx struct{ idemkit.TxStore }

func (snapshotTx) Peek(context.Context, string, string) (*idemkit.Record, error) {
	return nil, idemkit.ErrNotFound
}

// TestRetryableFailureOverAnotherPayloadIsAMismatch: in Guard.Tx and DoTx, a function that ran for a
// key another payload had finished meanwhile (nothing answered before it: the cache lost the key, a
// race without Redis) and failed retryably answered its own error, while the same run succeeding or
// failing permanently answered ErrPayloadMismatch, as the state table says of every state: the
// client retried a key it may never use for that payload. It is ErrPayloadMismatch whatever the
// function returned.
func TestRetryableFailureOverAnotherPayloadIsAMismatch(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	other := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusSucceeded, Fence: 1, Owner: "other",
		Fingerprint: "payload-A", Response: []byte("A's"), LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(time.Hour),
		CreatedAt: now, UpdatedAt: now}
	call := idemkit.Call{Scope: "s", Key: "k", Fingerprint: "payload-B"}
	for _, kind := range []string{"retryable", "permanent", "success"} {
		fnErr := map[string]error{"retryable": errors.New("busy"), "permanent": idemkit.Permanent(errors.New("declined"))}[kind]
		t.Run("Tx/"+kind, func(t *testing.T) {
			s := memory.NewStore()
			if err := s.Insert(ctx, other); err != nil {
				t.Fatal(err)
			}
			// The Locker lost the key (Redis restarted empty): its cache vouches for it, nothing is read.
			g, err := idemkit.New(s, &idemkit.Options{Locker: memory.NewLocker(nil)})
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			_, err = g.Tx(ctx, s, call, func(context.Context, idemkit.TxStore) ([]byte, error) { ran = true; return []byte("B's"), fnErr })
			if !ran {
				t.Fatal("the function did not run: the test no longer sets up the race")
			}
			if !errors.Is(err, idemkit.ErrPayloadMismatch) {
				t.Errorf("Tx whose function (%s) ran over another payload's record: %v, want ErrPayloadMismatch", kind, err)
			}
		})
		t.Run("DoTx/"+kind, func(t *testing.T) {
			s := memory.NewStore()
			if err := s.Insert(ctx, other); err != nil {
				t.Fatal(err)
			}
			g, err := idemkit.New(s, nil)
			if err != nil {
				t.Fatal(err)
			}
			tx, err := s.BeginTx(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback() }()
			ran := false
			_, err = g.DoTx(ctx, snapshotTx{tx}, call, func(context.Context) ([]byte, error) { ran = true; return []byte("B's"), fnErr })
			if !ran {
				t.Fatal("the function did not run: the test no longer sets up the race")
			}
			if !errors.Is(err, idemkit.ErrPayloadMismatch) {
				t.Errorf("DoTx whose function (%s) ran over another payload's record: %v, want ErrPayloadMismatch", kind, err)
			}
		})
	}
}
