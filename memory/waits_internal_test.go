package memory

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// TestRolledBackTxWaitsForNothing: a transaction its context rolled back while it waited for a key
// waits for nothing any more, so no cycle is found through it. a waits for x's key and b for a's; a's
// context ends and its rollback frees a's key for b. Until a's and b's goroutines ran again, a was
// still recorded as waiting for x (and b for a), so x asking for b's key found the cycle x → b → a → x
// that a's rollback had broken, and x was rolled back as a deadlock's victim where it had only to wait
// for b.
func TestRolledBackTxWaitsForNothing(t *testing.T) {
	bg, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := NewStore()
	actx, cancelA := context.WithCancel(bg)
	defer cancelA()
	begin := func(ctx context.Context, key string) *Tx {
		tx, err := s.BeginTx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Get(bg, "s", key); !errors.Is(err, idemkit.ErrNotFound) {
			t.Fatal(err)
		}
		return tx.(*Tx)
	}
	a, b, x := begin(actx, "a"), begin(bg, "b"), begin(bg, "x")
	defer func() { _ = x.Rollback() }()
	waiting := func(tx *Tx) {
		for {
			s.mu.Lock()
			w := tx.waits
			s.mu.Unlock()
			if w != nil {
				return
			}
			select {
			case <-bg.Done():
				t.Fatal(bg.Err())
			case <-time.After(time.Millisecond):
			}
		}
	}
	aDone, bDone := make(chan error, 1), make(chan error, 1)
	go func() { _, err := a.Get(bg, "s", "x"); aDone <- err }()
	waiting(a)
	go func() {
		_, err := b.Get(bg, "s", "a")
		if errors.Is(err, idemkit.ErrNotFound) {
			err = b.Commit()
		}
		bDone <- err
	}()
	waiting(b)

	// a's context ends, and its rollback (see BeginTx) runs before a's and b's goroutines do again.
	s.mu.Lock()
	cancelA()
	a.release(nil)
	cycle := x.closesCycle(b)
	s.mu.Unlock()
	if cycle {
		t.Error("x waiting for b closes a cycle through a, rolled back by its context: x would be a deadlock's victim")
	}
	if err := <-aDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("a's wait: %v, want context.Canceled", err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("b, which waited for a's key: %v", err)
	}
	if _, err := x.Get(bg, "s", "b"); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("x's read of b's key after b committed: %v", err)
	}
}
