package idemkit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
)

// unreadableAfterLostReplyStore loses the reply of its next Insert once armed (the mark is written,
// its caller hears of a failure), and then cannot be read: the first read after it fails at once, as
// on a database still unreachable, and the next one waits until heal is closed (the watch's look,
// pending while the database stays away), waiting closed when it starts waiting.
type unreadableAfterLostReplyStore struct {
	idemkit.Store
	armed, failRead, holdRead atomic.Bool
	waiting, heal             chan struct{}
	healOnce                  sync.Once
}

func newUnreadableAfterLostReplyStore(t *testing.T, base idemkit.Store) *unreadableAfterLostReplyStore {
	s := &unreadableAfterLostReplyStore{Store: base, waiting: make(chan struct{}), heal: make(chan struct{})}
	t.Cleanup(s.healNow) // a test that failed early leaves no watch waiting
	return s
}

func (s *unreadableAfterLostReplyStore) healNow() { s.healOnce.Do(func() { close(s.heal) }) }

func (s *unreadableAfterLostReplyStore) Insert(ctx context.Context, rec *idemkit.Record) error {
	err := s.Store.Insert(ctx, rec)
	if err == nil && s.armed.CompareAndSwap(true, false) {
		s.failRead.Store(true)
		s.holdRead.Store(true)
		return errConnReset
	}
	return err
}

func (s *unreadableAfterLostReplyStore) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	if s.failRead.CompareAndSwap(true, false) {
		return nil, errRefused
	}
	if s.holdRead.CompareAndSwap(true, false) {
		close(s.waiting)
		select {
		case <-s.heal:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.Get(ctx, scope, key)
}

// TestMarkWhoseReplyWasLostKeepsItsLock: a mark whose INSERT landed but whose reply was lost, and
// which the call could not look at before answering (the database still unreachable), is released by
// a watch in the background; the call answered ErrStoreUnavailable and released its lock at once. A
// retry arriving before the watch's look (the database back) took the lock, met the mark — SUCCEEDED
// from its claim on — and got ErrDuplicate, final: a msgx Mark consumer acknowledged a message whose
// function never ran. The watch now keeps the call's lock until it has seen what stands: the retry in
// that window is in flight (retryable), and once the mark is released a retry runs the function.
func TestMarkWhoseReplyWasLostKeepsItsLock(t *testing.T) {
	rdb := testsvc.Redis(t)
	prefix := testsvc.Name("markwindow-") + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	lockers := map[string]func() idemkit.Locker{
		"memory lock": func() idemkit.Locker { return memory.NewLocker(nil) },
		"redis lock":  func() idemkit.Locker { return lock.New(rdb, &lock.Options{Prefix: prefix}) },
	}
	for storeName, base := range lateClaimStores(t) {
		for lockName, newLocker := range lockers {
			t.Run(storeName+"/"+lockName, func(t *testing.T) {
				st := newUnreadableAfterLostReplyStore(t, base)
				g, err := idemkit.New(st, &idemkit.Options{Locker: newLocker()})
				if err != nil {
					t.Fatal(err)
				}
				call := idemkit.Call{Scope: "s", Key: testsvc.Name("lostmark-")}
				var runs atomic.Int32
				mark := func() error {
					return g.Mark(ctxb, call, func(context.Context) error { runs.Add(1); return nil })
				}
				st.armed.Store(true)
				if err := mark(); !errors.Is(err, idemkit.ErrStoreUnavailable) || runs.Load() != 0 {
					t.Fatalf("mark with a lost reply: %v after %d runs, want ErrStoreUnavailable and no run", err, runs.Load())
				}
				select {
				case <-st.waiting:
				case <-time.After(10 * time.Second):
					t.Fatal("no watch looked at the mark whose reply was lost")
				}
				// The database is back for the retry; the watch has not seen the mark yet.
				if err := mark(); !errors.Is(err, idemkit.ErrInFlight) || runs.Load() != 0 {
					rec, gerr := g.Get(ctxb, call.Scope, call.Key)
					t.Fatalf("retry before the watch's look: %v after %d runs (record %+v, %v); want ErrInFlight and no run", err, runs.Load(), rec, gerr)
				}
				st.healNow()
				deadline := time.Now().Add(5 * time.Second)
				for {
					err := mark()
					if err == nil && runs.Load() == 1 {
						break
					}
					if !errors.Is(err, idemkit.ErrInFlight) || time.Now().After(deadline) {
						t.Fatalf("retry once the watch looked: %v after %d runs; want in flight, then the function run once", err, runs.Load())
					}
					time.Sleep(10 * time.Millisecond)
				}
				if err := mark(); !errors.Is(err, idemkit.ErrDuplicate) || runs.Load() != 1 {
					t.Fatalf("duplicate after the run: %v after %d runs, want ErrDuplicate", err, runs.Load())
				}
			})
		}
	}
}

// downAfterLostReplyStore loses the reply of its next Insert once armed, and then fails every read
// while down is set: a database that stays unreachable.
type downAfterLostReplyStore struct {
	idemkit.Store
	armed, down atomic.Bool
}

func (s *downAfterLostReplyStore) Insert(ctx context.Context, rec *idemkit.Record) error {
	err := s.Store.Insert(ctx, rec)
	if err == nil && s.armed.CompareAndSwap(true, false) {
		s.down.Store(true)
		return errConnReset
	}
	return err
}

func (s *downAfterLostReplyStore) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	if s.down.Load() {
		return nil, errRefused
	}
	return s.Store.Get(ctx, scope, key)
}

// TestMarkWhoseReplyWasLostKeepsItsLockPastLockTTL: the watch of a mark whose reply was lost keeps
// the call's lock (see TestMarkWhoseReplyWasLostKeepsItsLock) for as long as the database stays
// unreadable, renewing it: a LockTTL shorter than that does not open the window again.
func TestMarkWhoseReplyWasLostKeepsItsLockPastLockTTL(t *testing.T) {
	const lockTTL = 600 * time.Millisecond
	rdb := testsvc.Redis(t)
	prefix := testsvc.Name("markwindow-ttl-") + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	lockers := map[string]idemkit.Locker{"memory lock": memory.NewLocker(nil), "redis lock": lock.New(rdb, &lock.Options{Prefix: prefix})}
	for name, lk := range lockers {
		t.Run(name, func(t *testing.T) {
			st := &downAfterLostReplyStore{Store: memory.NewStore()}
			g, err := idemkit.New(st, &idemkit.Options{Locker: lk, LockTTL: lockTTL})
			if err != nil {
				t.Fatal(err)
			}
			call := idemkit.Call{Scope: "s", Key: testsvc.Name("lostmark-")}
			var runs atomic.Int32
			mark := func() error {
				return g.Mark(ctxb, call, func(context.Context) error { runs.Add(1); return nil })
			}
			st.armed.Store(true)
			if err := mark(); !errors.Is(err, idemkit.ErrStoreUnavailable) || runs.Load() != 0 {
				t.Fatalf("mark with a lost reply: %v after %d runs, want ErrStoreUnavailable and no run", err, runs.Load())
			}
			// Retries while the database stays away, for several LockTTLs: the lock is still the
			// call's (a retry that took it would meet the database's failure instead).
			for end := time.Now().Add(4 * lockTTL); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if err := mark(); !errors.Is(err, idemkit.ErrInFlight) || runs.Load() != 0 {
					t.Fatalf("retry while the database is unreachable: %v after %d runs, want ErrInFlight", err, runs.Load())
				}
			}
			st.down.Store(false)
			deadline := time.Now().Add(5 * time.Second)
			for {
				err := mark()
				if err == nil && runs.Load() == 1 {
					return
				}
				if !errors.Is(err, idemkit.ErrInFlight) || time.Now().After(deadline) {
					t.Fatalf("retry once the database is back: %v after %d runs; want in flight, then the function run once", err, runs.Load())
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
