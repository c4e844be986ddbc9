package idemkit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// flakyFinishStore is a memory Store whose first finish (an Update, or a Delete) fails, as a write a
// database was too slow to answer within FinishTimeout, or a connection it dropped.
type flakyFinishStore struct {
	*memory.Store
	updates, deletes atomic.Int32
}

func (s *flakyFinishStore) Update(ctx context.Context, r *idemkit.Record, prev idemkit.Version) error {
	if r.Status != idemkit.StatusProcessing && s.updates.Add(1) == 1 {
		return errors.New("i/o timeout")
	}
	return s.Store.Update(ctx, r, prev)
}

func (s *flakyFinishStore) Delete(ctx context.Context, scope, key string, prev idemkit.Version) error {
	if s.deletes.Add(1) == 1 {
		return errors.New("i/o timeout")
	}
	return s.Store.Delete(ctx, scope, key, prev)
}

// TestUnwrittenFinishIsWrittenLater: a finish whose write failed (the store slow or gone for a moment)
// left the record PROCESSING; once its lease ran out, a retry of the key took it over and ran the work
// a second time — the order created twice, although the first call's work was done and its outcome
// known. The Guard writes that outcome again in the background until it lands, so the retry is
// answered with it. Likewise a mark whose function failed: its FAILED is written again, so the key is
// free again rather than taken for done until it expires.
func TestUnwrittenFinishIsWrittenLater(t *testing.T) {
	const lease = 300 * time.Millisecond
	st := &flakyFinishStore{Store: memory.NewStore()}
	g, err := idemkit.New(st, &idemkit.Options{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("Execute", func(t *testing.T) {
		var runs atomic.Int32
		fn := func(context.Context) ([]byte, error) { runs.Add(1); return []byte("order-1"), nil }
		c := idemkit.Call{Scope: "orders", Key: "k"}
		if _, err := g.Do(ctx, c, fn); !errors.Is(err, idemkit.ErrStoreUnavailable) {
			t.Fatalf("first call: %v, want ErrStoreUnavailable (its finish failed)", err)
		}
		time.Sleep(lease + 100*time.Millisecond) // the lease over: an unwritten claim would be taken over
		res, err := g.Do(ctx, c, fn)
		if err != nil || !res.Replayed || string(res.Value) != "order-1" {
			t.Fatalf("retry after the lease: %+v, %v; want the first call's result replayed", res, err)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("the work ran %d times, want once", n)
		}
	})

	t.Run("MarkFailed", func(t *testing.T) {
		var runs atomic.Int32
		st.updates.Store(0) // this subtest's first finish fails
		c := idemkit.Call{Scope: "marks", Key: "k"}
		failing := func(context.Context) error { runs.Add(1); return errors.New("payment gateway down") }
		if err := g.Mark(ctx, c, failing); !errors.Is(err, idemkit.ErrStoreUnavailable) {
			t.Fatalf("first call: %v, want ErrStoreUnavailable (its mark could not be finished FAILED)", err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := g.Mark(ctx, c, func(context.Context) error { runs.Add(1); return nil })
			if err == nil {
				break
			}
			if !errors.Is(err, idemkit.ErrDuplicate) || time.Now().After(deadline) {
				t.Fatalf("retry of a failed mark: %v; want it run once the mark is FAILED", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if n := runs.Load(); n != 2 {
			t.Fatalf("ran %d times, want twice (the failure, then the retry)", n)
		}
	})
}

// abandoningStore is a flakyFinishStore whose Inserts of keys starting with "gone" wait until their
// caller leaves, as claims on a stalled database do: each caller's abandoned claim is then watched in
// the background, for as long as it matters.
type abandoningStore struct{ flakyFinishStore }

func (s *abandoningStore) Insert(ctx context.Context, r *idemkit.Record) error {
	if strings.HasPrefix(r.Key, "gone") {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.Insert(ctx, r)
}

// TestUnwrittenFinishWrittenBesideAbandonedClaims: the rewrites of unwritten finishes shared their
// bound with the watches of abandoned claims, which a stalled store fills by the dozen (every caller
// that gives up leaves one): the rewrite of a call that finished was dropped, and once its lease ran
// out the retry ran the work a second time. Each has a bound of its own.
func TestUnwrittenFinishWrittenBesideAbandonedClaims(t *testing.T) {
	const lease = 300 * time.Millisecond
	st := &abandoningStore{flakyFinishStore{Store: memory.NewStore()}}
	g, err := idemkit.New(st, &idemkit.Options{Lease: lease, FinishTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	fn := func(context.Context) ([]byte, error) { runs.Add(1); return []byte("order-1"), nil }
	for i := range 100 { // more than the bound: callers that gave up on a stalled store
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, err := g.Do(ctx, idemkit.Call{Scope: "orders", Key: fmt.Sprintf("gone%d", i)}, fn)
		cancel()
		if err == nil {
			t.Fatal("a call whose claim never landed succeeded")
		}
	}
	c := idemkit.Call{Scope: "orders", Key: "k"}
	if _, err := g.Do(context.Background(), c, fn); !errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("first call: %v, want ErrStoreUnavailable (its finish failed)", err)
	}
	time.Sleep(lease + 100*time.Millisecond)
	res, err := g.Do(context.Background(), c, fn)
	if err != nil || !res.Replayed || string(res.Value) != "order-1" {
		t.Fatalf("retry after the lease: %+v, %v; want the first call's result replayed", res, err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the work ran %d times, want once", n)
	}
}
