package idemkit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// A Do that reads a mark whose function still runs replays it (one mode per scope is the rule), but
// must not cache it: when the mark's function then failed and its mark was deleted, the cache went
// on answering the key as done for CacheTTL, and Mark's retry got ErrDuplicate although nothing
// succeeded.
func TestMarkInProgressReadByDoIsNotCached(t *testing.T) {
	store, lk := memory.NewStore(), memory.NewLocker(nil)
	marker, err := idemkit.New(store, nil) // no Locker: the Do below finds the key unlocked
	if err != nil {
		t.Fatal(err)
	}
	g, err := idemkit.New(store, &idemkit.Options{Locker: lk})
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "s", Key: "k"}
	running, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- marker.Mark(ctxb, call, func(context.Context) error {
			close(running)
			<-release
			return errors.New("retryable")
		})
	}()
	<-running
	res, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) { return []byte("ran"), nil })
	if err != nil || !res.Replayed {
		t.Fatalf("Do on a key Mark holds: %+v, %v; want the mark replayed", res, err)
	}
	close(release)
	if err := <-done; err == nil {
		t.Fatal("Mark's function failed, Mark returned nil")
	}
	if rec, err := store.Get(ctxb, "s", "k"); err != nil || rec.Status != idemkit.StatusFailed {
		t.Fatalf("record after the mark's retryable failure: %+v, %v; want it FAILED", rec, err)
	}
	ran := false
	if err := g.Mark(ctxb, call, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("Mark's retry after its failure: %v (ran %v), want it to run", err, ran)
	}
}
