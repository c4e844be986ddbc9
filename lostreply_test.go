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

// lostReplyLocker's Acquire takes effect but its reply is lost: to the caller's deadline (cancel
// set), or to a read timeout.
type lostReplyLocker struct {
	idemkit.Locker
	cancel context.CancelFunc
}

var errReadTimeout = errors.New("read tcp 127.0.0.1:50000->127.0.0.1:6379: i/o timeout")

func (l *lostReplyLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	cached, err := l.Locker.Acquire(ctx, key, token, ttl)
	if err != nil || cached != nil {
		return cached, err
	}
	if l.cancel != nil {
		l.cancel()
		return nil, ctx.Err()
	}
	return nil, errReadTimeout
}

// An Acquire that locked the key but whose reply never reached the Guard leaves a lock nobody
// releases: the call's retries (and, under FailOpen, the duplicates of a key finished meanwhile) met
// "in flight" until LockTTL ran out.
func TestLockWhoseReplyWasLostIsReleased(t *testing.T) {
	run := func(context.Context) ([]byte, error) { return []byte("ok"), nil }
	call := idemkit.Call{Scope: "s", Key: "k"}

	t.Run("caller left", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctxb)
		defer cancel()
		inner, store := memory.NewLocker(nil), memory.NewStore()
		g, err := idemkit.New(store, &idemkit.Options{Locker: &lostReplyLocker{Locker: inner, cancel: cancel}, LockTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Do(ctx, call, run); !errors.Is(err, context.Canceled) {
			t.Fatalf("Do with its context ending during Acquire: %v", err)
		}
		// The retry, whose Acquire gets its reply.
		g2, err := idemkit.New(store, &idemkit.Options{Locker: inner, LockTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		eventuallyRuns(t, g2, call, run)
	})

	t.Run("fail open", func(t *testing.T) {
		inner, store := memory.NewLocker(nil), memory.NewStore()
		g, err := idemkit.New(store, &idemkit.Options{Locker: &lostReplyLocker{Locker: inner}, LockTTL: time.Minute, FailOpen: true})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := g.Do(ctxb, call, run); err != nil || string(res.Value) != "ok" {
			t.Fatalf("Do, failing open: %+v, %v", res, err)
		}
		// A duplicate through the Locker, healthy again: the key is finished, not in flight.
		g2, err := idemkit.New(store, &idemkit.Options{Locker: inner, LockTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the duplicate's replay", func() (string, bool) {
			res, err := g2.Do(ctxb, call, func(context.Context) ([]byte, error) { return nil, errors.New("ran again") })
			return fmt.Sprintf("%+v, %v", res, err), err == nil && res.Replayed && string(res.Value) == "ok"
		})
	})
}

// eventuallyRuns calls Do until fn runs, for up to two seconds.
func eventuallyRuns(t *testing.T, g *idemkit.Guard, call idemkit.Call, fn idemkit.Func) {
	t.Helper()
	eventually(t, "a retry that runs", func() (string, bool) {
		res, err := g.Do(ctxb, call, fn)
		return fmt.Sprintf("%+v, %v", res, err), err == nil && !res.Replayed
	})
}

// eventually calls try until it says done, for up to two seconds (far below the LockTTL).
func eventually(t *testing.T, what string, try func() (got string, done bool)) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		got, done := try()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: got %s (the lock of an Acquire whose reply was lost is still there)", what, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failFirstRelease's first Release fails without taking effect, as on a connection Redis dropped.
type failFirstRelease struct {
	idemkit.Locker
	failed atomic.Bool
}

func (l *failFirstRelease) Release(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	if l.failed.CompareAndSwap(false, true) {
		return errors.New("write tcp 127.0.0.1:50000->127.0.0.1:6379: connection reset by peer")
	}
	return l.Locker.Release(ctx, key, token, result, ttl)
}

// TestLockWhoseReplyWasLostIsReleasedDespiteABlip: the release of a lock an Acquire took although its
// reply was lost was tried once; when it failed too (the same blip), the lock stayed and the call's
// retries met "in flight" until LockTTL ran out. It is retried as a failed release is.
func TestLockWhoseReplyWasLostIsReleasedDespiteABlip(t *testing.T) {
	run := func(context.Context) ([]byte, error) { return []byte("ok"), nil }
	call := idemkit.Call{Scope: "s", Key: "k"}
	inner, store := memory.NewLocker(nil), memory.NewStore()
	lk := &lostReplyLocker{Locker: &failFirstRelease{Locker: inner}}
	g, err := idemkit.New(store, &idemkit.Options{Locker: lk, LockTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(ctxb, call, run); !errors.Is(err, idemkit.ErrLockUnavailable) {
		t.Fatalf("Do whose Acquire reply was lost: %v", err)
	}
	// The retry, whose Acquire gets its reply.
	g2, err := idemkit.New(store, &idemkit.Options{Locker: inner, LockTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	eventuallyRuns(t, g2, call, run)
}

// outageLocker fails every Acquire of a key starting with "down", as a read timeout after the
// command took effect, and every Release while down is set.
type outageLocker struct {
	idemkit.Locker
	down atomic.Bool
}

func (l *outageLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	if strings.HasPrefix(key, "down") || strings.Contains(key, ":down") {
		return nil, errReadTimeout
	}
	return l.Locker.Acquire(ctx, key, token, ttl)
}

func (l *outageLocker) Release(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	if l.down.Load() {
		return errReadTimeout
	}
	return l.Locker.Release(ctx, key, token, result, ttl)
}

// TestFailedReleaseRetriedDuringAnOutage: the retries of failed releases shared their bound with the
// releases of the locks failed Acquires may have taken, which an outage fills (every call's Acquire
// fails, and each release is retried for FinishTimeout): the retry of a finished call's release was
// dropped, and its lock stayed until LockTTL. Each kind has a bound of its own.
func TestFailedReleaseRetriedDuringAnOutage(t *testing.T) {
	inner, store := memory.NewLocker(nil), memory.NewStore()
	lk := &outageLocker{Locker: inner}
	lk.down.Store(true)
	g, err := idemkit.New(store, &idemkit.Options{Locker: lk, LockTTL: time.Minute, FinishTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	run := func(context.Context) ([]byte, error) { return []byte("ok"), nil }
	for i := range 100 { // more than the bound
		if _, err := g.Do(ctxb, idemkit.Call{Scope: "s", Key: fmt.Sprintf("down%d", i)}, run); !errors.Is(err, idemkit.ErrLockUnavailable) {
			t.Fatalf("Do with its Acquire failing: %v", err)
		}
	}
	call := idemkit.Call{Scope: "s", Key: "k"}
	if _, err := g.Do(ctxb, call, run); err != nil { // its release fails
		t.Fatal(err)
	}
	lk.down.Store(false)
	g2, err := idemkit.New(store, &idemkit.Options{Locker: inner, LockTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the duplicate's replay", func() (string, bool) {
		res, err := g2.Do(ctxb, call, func(context.Context) ([]byte, error) { return nil, errors.New("ran again") })
		return fmt.Sprintf("%+v, %v", res, err), err == nil && res.Replayed && string(res.Value) == "ok"
	})
}
