package lock_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/redis/go-redis/v9"
)

func TestLocker(t *testing.T) {
	l, b := setup(t)
	ctx := testCtx(t)
	a, c := token(), token()

	if v, err := l.Acquire(ctx, "k", a, time.Minute); err != nil || v != nil {
		t.Fatalf("first Acquire = %q, %v; want nil, nil", v, err)
	}
	// The lock is a plain string key holding the token, with a TTL.
	if got := b.rdb.Get(ctx, b.prefix+"{k}:lock").Val(); got != a {
		t.Fatalf("lock key holds %q, want the token %q", got, a)
	}
	if ttl := b.rdb.PTTL(ctx, b.prefix+"{k}:lock").Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("lock key PTTL = %s, want in (0, 1m]", ttl)
	}

	_, err := l.Acquire(ctx, "k", c, time.Minute)
	var inflight *idemkit.InFlightError
	if !errors.As(err, &inflight) || !errors.Is(err, idemkit.ErrLocked) || !errors.Is(err, idemkit.ErrInFlight) {
		t.Fatalf("second token's Acquire = %v; want *InFlightError", err)
	}
	if inflight.RetryAfter <= 0 || inflight.RetryAfter > time.Minute {
		t.Fatalf("RetryAfter = %s, want in (0, 1m]", inflight.RetryAfter)
	}

	// The holder's own token again (a retried command): still its lock, ttl reset.
	if _, err := l.Acquire(ctx, "k", a, 2*time.Hour); err != nil {
		t.Fatalf("holder's Acquire again = %v; want nil", err)
	}
	if ttl := b.rdb.PTTL(ctx, b.prefix+"{k}:lock").Val(); ttl <= time.Hour {
		t.Fatalf("after the holder's Acquire(2h) PTTL = %s, want over 1h", ttl)
	}

	if err := l.Refresh(ctx, "k", c, time.Minute); !errors.Is(err, idemkit.ErrLockNotHeld) {
		t.Fatalf("Refresh with another token = %v; want ErrLockNotHeld", err)
	}
	if err := l.Refresh(ctx, "k", a, 2*time.Hour); err != nil {
		t.Fatalf("Refresh = %v", err)
	}
	if ttl := b.rdb.PTTL(ctx, b.prefix+"{k}:lock").Val(); ttl <= time.Hour {
		t.Fatalf("after Refresh(2h) PTTL = %s, want over 1h", ttl)
	}

	if err := l.Release(ctx, "k", c, nil, 0); !errors.Is(err, idemkit.ErrLockNotHeld) {
		t.Fatalf("Release with another token = %v; want ErrLockNotHeld", err)
	}
	if err := l.Release(ctx, "k", a, []byte("result"), time.Minute); err != nil {
		t.Fatalf("Release = %v", err)
	}
	if n := b.rdb.Exists(ctx, b.prefix+"{k}:lock").Val(); n != 0 {
		t.Fatal("lock key still exists after Release")
	}
	if err := l.Release(ctx, "k", a, nil, 0); !errors.Is(err, idemkit.ErrLockNotHeld) {
		t.Fatalf("second Release = %v; want ErrLockNotHeld", err)
	}
	if err := l.Refresh(ctx, "k", a, time.Minute); !errors.Is(err, idemkit.ErrLockNotHeld) {
		t.Fatalf("Refresh after Release = %v; want ErrLockNotHeld", err)
	}

	// Cached: Acquire returns the result and takes no lock.
	v, err := l.Acquire(ctx, "k", c, time.Minute)
	if err != nil || string(v) != "result" {
		t.Fatalf("Acquire of a cached key = %q, %v; want \"result\", nil", v, err)
	}
	if n := b.rdb.Exists(ctx, b.prefix+"{k}:lock").Val(); n != 0 {
		t.Fatal("Acquire of a cached key took the lock")
	}
	if ttl := b.rdb.PTTL(ctx, b.prefix+"{k}:result").Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("result key PTTL = %s, want in (0, 1m]", ttl)
	}
}

func TestLockerReleaseCachesWhoeverHoldsTheLock(t *testing.T) {
	l, b := setup(t)
	ctx := testCtx(t)
	a, c := token(), token()
	if _, err := l.Acquire(ctx, "k", a, time.Minute); err != nil {
		t.Fatal(err)
	}
	// c never held the lock: its result is cached all the same, a's lock stays.
	if err := l.Release(ctx, "k", c, []byte("late"), time.Minute); !errors.Is(err, idemkit.ErrLockNotHeld) {
		t.Fatalf("Release by a non-holder = %v; want ErrLockNotHeld", err)
	}
	if got := b.rdb.Get(ctx, b.prefix+"{k}:lock").Val(); got != a {
		t.Fatalf("a non-holder's Release changed the lock to %q", got)
	}
	if v, err := l.Acquire(ctx, "k", token(), time.Minute); err != nil || string(v) != "late" {
		t.Fatalf("Acquire = %q, %v; want the cached \"late\"", v, err)
	}
	// An empty result is cached too, and comes back empty but not nil.
	if _, err := l.Acquire(ctx, "e", a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "e", a, []byte{}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Acquire(ctx, "e", c, time.Minute); err != nil || v == nil || len(v) != 0 {
		t.Fatalf("Acquire of an empty cached result = %#v, %v; want []byte{}, nil", v, err)
	}
	// Without a cache TTL nothing is cached.
	if _, err := l.Acquire(ctx, "n", a, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, "n", a, []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if n := b.rdb.Exists(ctx, b.prefix+"{n}:result").Val(); n != 0 {
		t.Fatal("Release with cacheTTL 0 cached the result")
	}
}

func TestLockerTTLValidation(t *testing.T) {
	l, _ := setup(t)
	ctx := testCtx(t)
	for _, ttl := range []time.Duration{0, -time.Second} {
		if _, err := l.Acquire(ctx, "k", token(), ttl); err == nil || errors.Is(err, idemkit.ErrLocked) {
			t.Errorf("Acquire(ttl=%s) = %v; want a validation error", ttl, err)
		}
		if err := l.Refresh(ctx, "k", token(), ttl); err == nil || errors.Is(err, idemkit.ErrLockNotHeld) {
			t.Errorf("Refresh(ttl=%s) = %v; want a validation error", ttl, err)
		}
	}
	// A sub-millisecond TTL rounds up rather than failing or meaning "forever".
	tok := token()
	if _, err := l.Acquire(ctx, "sub", tok, time.Microsecond); err != nil {
		t.Fatalf("Acquire(1µs) = %v", err)
	}
}

func TestNewOptions(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never dialled
	t.Cleanup(func() { _ = rdb.Close() })
	for _, prefix := range []string{"a{", "}", "x{y}:"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(Prefix %q) did not panic", prefix)
				}
			}()
			lock.New(rdb, &lock.Options{Prefix: prefix})
		}()
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("New(nil client) did not panic")
			}
		}()
		lock.New(nil, nil)
	}()
	// The caller's struct is copied and never changed.
	o := &lock.Options{}
	lock.New(rdb, o)
	if o.Prefix != "" {
		t.Errorf("New changed the caller's Options: Prefix = %q", o.Prefix)
	}
}

func TestLockerContext(t *testing.T) {
	l, b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Acquire(ctx, "k", token(), time.Minute); !errors.Is(err, context.Canceled) || errors.Is(err, idemkit.ErrLocked) {
		t.Fatalf("Acquire on a cancelled context = %v; want context.Canceled", err)
	}
	if err := l.Refresh(ctx, "k", token(), time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("Refresh on a cancelled context = %v; want context.Canceled", err)
	}
	if err := l.Release(ctx, "k", token(), nil, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Release on a cancelled context = %v; want context.Canceled", err)
	}
	if n := b.rdb.Exists(testCtx(t), b.prefix+"{k}:lock").Val(); n != 0 {
		t.Fatal("an Acquire on a cancelled context took the lock")
	}
}

// TestLockerDeadlineBoundsIO talks to a server that accepts connections and never answers: the
// context's deadline, not the client's 3s read timeout, ends the call (ContextTimeoutEnabled).
func TestLockerDeadlineBoundsIO(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c // hold it open, never answer
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		for c := range accepted {
			_ = c.Close()
		}
	})
	rdb := redis.NewClient(&redis.Options{
		Addr: ln.Addr().String(), ContextTimeoutEnabled: true, MaxRetries: -1,
		ReadTimeout: time.Hour, WriteTimeout: time.Hour, Protocol: 2, DisableIdentity: true,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	l := lock.New(rdb, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(ctx, "k", token(), time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, idemkit.ErrLocked) {
		t.Fatalf("Acquire on a silent server = %v; want context.DeadlineExceeded", err)
	}
	if !strings.HasPrefix(err.Error(), "lock: acquiring: ") {
		t.Fatalf("error %q does not say what was being done", err)
	}
}

// TestLockerScriptFlush: when Redis forgets its scripts, the next call of each falls back from
// EVALSHA to EVAL and works. It flushes a private server, not the shared one other tests count
// commands on.
func TestLockerScriptFlush(t *testing.T) {
	_, rdb := privateRedis(t)
	l := lock.New(rdb, nil)
	ctx := testCtx(t)
	counter := &cmdCounter{}
	rdb.AddHook(counter)
	flush := func() {
		t.Helper()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		counter.take()
	}
	tok := token()
	flush()
	if _, err := l.Acquire(ctx, "k", tok, time.Minute); err != nil {
		t.Fatalf("Acquire after SCRIPT FLUSH = %v", err)
	}
	if got := counter.take(); !slices.Equal(got, []string{"evalsha", "eval"}) {
		t.Fatalf("Acquire after SCRIPT FLUSH sent %v; want [evalsha eval]", got)
	}
	flush()
	if err := l.Refresh(ctx, "k", tok, time.Minute); err != nil {
		t.Fatalf("Refresh after SCRIPT FLUSH = %v", err)
	}
	flush()
	if err := l.Release(ctx, "k", tok, []byte("r"), time.Minute); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH = %v", err)
	}
	if got := counter.take(); !slices.Equal(got, []string{"evalsha", "eval"}) {
		t.Fatalf("Release after SCRIPT FLUSH sent %v; want [evalsha eval]", got)
	}
	// EVAL cached the script again: the next call is one EVALSHA.
	if v, err := l.Acquire(ctx, "k", token(), time.Minute); err != nil || string(v) != "r" {
		t.Fatalf("Acquire = %q, %v; want the cached \"r\"", v, err)
	}
	flush()
	if v, err := l.Acquire(ctx, "k", token(), time.Minute); err != nil || string(v) != "r" {
		t.Fatalf("Acquire after SCRIPT FLUSH = %q, %v; want the cached \"r\"", v, err)
	}
	if got := counter.take(); !slices.Equal(got, []string{"evalsha", "eval"}) {
		t.Fatalf("Acquire after SCRIPT FLUSH sent %v; want [evalsha eval]", got)
	}
	if _, err := l.Acquire(ctx, "k2", token(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := counter.take(); !slices.Equal(got, []string{"evalsha"}) {
		t.Fatalf("Acquire with the script cached sent %v; want [evalsha]", got)
	}
}
