package idemkit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// refusingStore is a database that refuses connections while down (its statements fail at once,
// nothing sent: max_connections reached, a server restarting), and whose next Insert, once late is
// set, lands after its caller gave up, as a statement waiting on a row lock does once the lock is free.
type refusingStore struct {
	idemkit.Store
	down, late atomic.Bool
	landed     chan struct{}
}

var errRefused = errors.New("Error 1040: Too many connections")

func (s *refusingStore) Insert(ctx context.Context, rec *idemkit.Record) error {
	if s.down.Load() {
		return errRefused
	}
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

func (s *refusingStore) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	if s.down.Load() {
		return nil, errRefused
	}
	return s.Store.Get(ctx, scope, key)
}

// TestRefusedClaimsDoNotCrowdOutAnAbandonedOne: a database that refused connections for a while (its
// max_connections filled by a stall) failed every call at once, the callers still waiting; each such
// claim, which never reached the database, was watched for the claim's lease (a minute at most) as one
// whose reply was lost, and the first 64 took every watch the Guard has. A claim whose caller left
// while its INSERT waited, and that landed afterwards — the case the watches are for — then found none:
// a mark stood for its TTL (a day), ErrDuplicate to every retry, its function never run. The watches
// of claims that failed while their callers waited no longer take those of abandoned ones.
func TestRefusedClaimsDoNotCrowdOutAnAbandonedOne(t *testing.T) {
	for name, base := range lateClaimStores(t) {
		t.Run(name, func(t *testing.T) {
			st := &refusingStore{Store: base, landed: make(chan struct{})}
			g, err := idemkit.New(st, &idemkit.Options{Lease: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			prefix := testsvc.Name("crowd-")
			st.down.Store(true)
			var wg sync.WaitGroup
			for i := range 100 {
				wg.Go(func() {
					err := g.Mark(ctxb, idemkit.Call{Scope: "s", Key: fmt.Sprint(prefix, i)}, func(context.Context) error { return nil })
					if !errors.Is(err, idemkit.ErrStoreUnavailable) {
						t.Errorf("call while the database refuses connections: %v, want ErrStoreUnavailable", err)
					}
				})
			}
			wg.Wait()
			st.down.Store(false)

			call := idemkit.Call{Scope: "s", Key: prefix + "left"}
			var runs atomic.Int32
			mark := func(ctx context.Context) error {
				return g.Mark(ctx, call, func(context.Context) error { runs.Add(1); return nil })
			}
			st.late.Store(true)
			ctx, cancel := context.WithTimeout(ctxb, 20*time.Millisecond)
			defer cancel()
			if err := mark(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("call whose caller left: %v, want its deadline", err)
			}
			<-st.landed
			deadline := time.Now().Add(5 * time.Second)
			for {
				err := mark(ctxb)
				if err == nil && runs.Load() == 1 {
					return
				}
				if !errors.Is(err, idemkit.ErrDuplicate) || time.Now().After(deadline) {
					t.Fatalf("retry of the abandoned mark: %v after %d runs, want the function run once within seconds", err, runs.Load())
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
