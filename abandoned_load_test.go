package idemkit_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// overloadedStore: a database too slow to answer before the callers' deadlines (Insert waits out the
// caller's context and never lands); its reads fail fast (pool exhausted, connection refused).
type overloadedStore struct {
	idemkit.Store
	gets atomic.Int64
}

func (s *overloadedStore) Insert(ctx context.Context, rec *idemkit.Record) error {
	<-ctx.Done()
	return ctx.Err()
}

func (s *overloadedStore) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	s.gets.Add(1)
	return nil, errors.New("driver: bad connection")
}

// TestAbandonedWatchesBounded: callers leaving by the hundred while the store stalls start at most a
// bounded number of watches for their claims (each watch reads the store until its claim's lease
// ends): 500 calls left a goroutine each, polling a failing store for the lease (found by a review).
func TestAbandonedWatchesBounded(t *testing.T) {
	st := &overloadedStore{Store: memory.NewStore()}
	g, err := idemkit.New(st, &idemkit.Options{Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for i := range 500 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, _ = g.Do(ctx, idemkit.Call{Scope: "s", Key: fmt.Sprint("k", i)}, func(context.Context) ([]byte, error) { return nil, nil })
		})
	}
	wg.Wait()
	// The callers' goroutines end just after their wg.Done, each in its own time: the count falls to
	// the watches' (which last the claims' lease, an hour here) once the scheduler has run them out.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		extra := runtime.NumGoroutine() - before
		if extra <= 80 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left by 500 abandoned claims, want at most the bounded number of watches (64)", extra)
		}
	}
}
