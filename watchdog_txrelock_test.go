package idemkit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// restartingLocker is a Locker that can lose everything it holds, as a Redis restarted without
// persistence (or flushed) does.
type restartingLocker struct {
	mu sync.Mutex
	l  *memory.Locker
}

func newRestartingLocker() *restartingLocker { return &restartingLocker{l: memory.NewLocker(nil)} }

func (r *restartingLocker) restart() {
	r.mu.Lock()
	r.l = memory.NewLocker(nil)
	r.mu.Unlock()
}

func (r *restartingLocker) cur() *memory.Locker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.l
}

func (r *restartingLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	return r.cur().Acquire(ctx, key, token, ttl)
}

func (r *restartingLocker) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	return r.cur().Refresh(ctx, key, token, ttl)
}

func (r *restartingLocker) Release(ctx context.Context, key, token string, result []byte, cacheTTL time.Duration) error {
	return r.cur().Release(ctx, key, token, result, cacheTTL)
}

// TestTxWatchdogCarriesOnAfterTheLockerLostItsLock: in the Tx modes the claim's outcome is decided by
// its transaction (the record's INSERT, or the mark's, conflicts with another attempt's), not by the
// lock, which only turns duplicates away early. The watchdog cancelled a Tx-mode function with
// ErrLockLost whenever a renewal found its lock gone — after every Redis restart, every function then
// running failed and had to be retried, with or without FailOpen, although no other attempt existed.
// It now takes the lock again and lets the function carry on; when another attempt holds the lock by
// then, it cancels as before.
func TestTxWatchdogCarriesOnAfterTheLockerLostItsLock(t *testing.T) {
	const lockTTL = 300 * time.Millisecond
	modes := map[string]func(g *idemkit.Guard, s *memory.Store, c idemkit.Call, fn func(ctx context.Context) error) ([]byte, error){
		"Tx": func(g *idemkit.Guard, s *memory.Store, c idemkit.Call, fn func(ctx context.Context) error) ([]byte, error) {
			res, err := g.Tx(ctxb, s, c, func(ctx context.Context, _ idemkit.TxStore) ([]byte, error) {
				return []byte("v"), fn(ctx)
			})
			return res.Value, err
		},
		"DoTx": func(g *idemkit.Guard, s *memory.Store, c idemkit.Call, fn func(ctx context.Context) error) ([]byte, error) {
			tx, err := s.BeginTx(ctxb)
			if err != nil {
				return nil, err
			}
			res, err := g.DoTx(ctxb, tx, c, func(ctx context.Context) ([]byte, error) { return []byte("v"), fn(ctx) })
			if err != nil {
				_ = tx.Rollback()
				return nil, err
			}
			return res.Value, tx.Commit()
		},
		"TxMark": func(g *idemkit.Guard, s *memory.Store, c idemkit.Call, fn func(ctx context.Context) error) ([]byte, error) {
			return nil, g.TxMark(ctxb, s, c, func(ctx context.Context, _ idemkit.TxStore) error { return fn(ctx) })
		},
		"MarkTx": func(g *idemkit.Guard, s *memory.Store, c idemkit.Call, fn func(ctx context.Context) error) ([]byte, error) {
			tx, err := s.BeginTx(ctxb)
			if err != nil {
				return nil, err
			}
			if err := g.MarkTx(ctxb, tx, c, fn); err != nil {
				_ = tx.Rollback()
				return nil, err
			}
			return nil, tx.Commit()
		},
	}
	for name, run := range modes {
		for _, failOpen := range []bool{false, true} {
			for _, intruder := range []bool{false, true} {
				s := memory.NewStore()
				locker := newRestartingLocker()
				g, err := idemkit.New(s, &idemkit.Options{Locker: locker, LockTTL: lockTTL, Watchdog: true, FailOpen: failOpen, TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				c := idemkit.Call{Scope: "s", Key: "k"}
				var cause error
				val, err := run(g, s, c, func(ctx context.Context) error {
					locker.restart()
					if intruder { // another attempt takes the lock right after the restart
						if _, err := locker.Acquire(ctxb, "1:s:k", "intruder", time.Minute); err != nil {
							t.Errorf("%s: the intruder could not lock: %v", name, err)
						}
					}
					// Three renewal periods; with an intruder, until the watchdog cancels (a renewal
					// is due every 100 ms, but a loaded machine can make one later than the three).
					wait := lockTTL
					if intruder {
						wait = 10 * time.Second
					}
					select {
					case <-ctx.Done():
						cause = context.Cause(ctx)
						return cause
					case <-time.After(wait):
						return nil
					}
				})
				switch {
				case intruder && !errors.Is(cause, idemkit.ErrLockLost):
					t.Errorf("%s (FailOpen %v), another attempt holding the lock: the function's context ended with %v, want ErrLockLost", name, failOpen, cause)
				case intruder:
				case err != nil || cause != nil:
					t.Errorf("%s (FailOpen %v): the call answered %v, the function's context %v; want it carried on", name, failOpen, err, cause)
				case !strings.Contains(name, "Mark") && string(val) != "v":
					t.Errorf("%s (FailOpen %v): value %q", name, failOpen, val)
				default:
					// The key is finished once: a duplicate does not run.
					ran := false
					if _, err := run(g, s, c, func(context.Context) error { ran = true; return nil }); ran || (err != nil && !errors.Is(err, idemkit.ErrDuplicate)) {
						t.Errorf("%s (FailOpen %v): the duplicate ran %v, answered %v", name, failOpen, ran, err)
					}
				}
			}
		}
	}
}
