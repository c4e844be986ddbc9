package lock_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/redis/go-redis/v9"
)

// eachMode runs f with a Locker on native commands and with one on Lua scripts (what a Redis before
// 7.0 gets).
func eachMode(t *testing.T, f func(t *testing.T, l *lock.Locker, b *bundle)) {
	for _, scripts := range []bool{false, true} {
		t.Run(map[bool]string{false: "Native", true: "Scripts"}[scripts], func(t *testing.T) {
			l, b := setupMode(t, scripts)
			f(t, l, b)
		})
	}
}

// lockValue reads the lock value of key and splits it.
func lockValue(t *testing.T, b *bundle, key string) (deadline time.Time, token string) {
	t.Helper()
	v, err := b.rdb.Get(testCtx(t), b.prefix+"{"+key+"}").Result()
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	d, tok, ok := strings.Cut(strings.TrimPrefix(v, "L"), ":")
	ms, err := strconv.ParseInt(d, 10, 64)
	if !strings.HasPrefix(v, "L") || !ok || err != nil {
		t.Fatalf("%s holds %q, want a lock value L<deadline>:<token>", key, v)
	}
	return time.UnixMilli(ms), tok
}

func TestLocker(t *testing.T) {
	eachMode(t, func(t *testing.T, l *lock.Locker, b *bundle) {
		ctx := testCtx(t)
		a, c := token(), token()
		key := b.prefix + "{k}"

		before := time.Now()
		if v, err := l.Acquire(ctx, "k", a, time.Minute); err != nil || v != nil {
			t.Fatalf("first Acquire = %q, %v; want nil, nil", v, err)
		}
		// One plain string key holds the lock: token and deadline, with a TTL.
		deadline, tok := lockValue(t, b, "k")
		if tok != a || deadline.Before(before.Add(time.Minute-time.Millisecond)) || deadline.After(time.Now().Add(time.Minute+time.Millisecond)) {
			t.Fatalf("lock holds token %q deadline %v; want %q, a minute from now", tok, deadline, a)
		}
		if ttl := b.rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
			t.Fatalf("key PTTL = %s, want in (0, 1m]", ttl)
		}

		_, err := l.Acquire(ctx, "k", c, time.Minute)
		var inflight *idemkit.InFlightError
		if !errors.As(err, &inflight) || !errors.Is(err, idemkit.ErrLocked) || !errors.Is(err, idemkit.ErrInFlight) {
			t.Fatalf("second token's Acquire = %v; want *InFlightError", err)
		}
		if inflight.RetryAfter <= 0 || inflight.RetryAfter > time.Minute {
			t.Fatalf("RetryAfter = %s, want in (0, 1m]", inflight.RetryAfter)
		}

		// The holder's own token again (a retried command whose reply was lost): still its lock.
		if _, err := l.Acquire(ctx, "k", a, 2*time.Hour); err != nil {
			t.Fatalf("holder's Acquire again = %v; want nil", err)
		}
		if _, tok := lockValue(t, b, "k"); tok != a {
			t.Fatalf("after the holder's second Acquire the lock holds %q", tok)
		}

		if err := l.Refresh(ctx, "k", c, time.Minute); !errors.Is(err, idemkit.ErrLockNotHeld) {
			t.Fatalf("Refresh with another token = %v; want ErrLockNotHeld", err)
		}
		if err := l.Refresh(ctx, "k", a, 2*time.Hour); err != nil {
			t.Fatalf("Refresh = %v", err)
		}
		if ttl := b.rdb.PTTL(ctx, key).Val(); ttl <= time.Hour {
			t.Fatalf("after Refresh(2h) PTTL = %s, want over 1h", ttl)
		}
		// The refreshed deadline is what a duplicate is told.
		if _, err := l.Acquire(ctx, "k", c, time.Minute); !errors.As(err, &inflight) || inflight.RetryAfter <= time.Hour {
			t.Fatalf("after Refresh(2h) a duplicate got %v; want RetryAfter over 1h", err)
		}

		if err := l.Release(ctx, "k", c, nil, 0); !errors.Is(err, idemkit.ErrLockNotHeld) {
			t.Fatalf("Release with another token = %v; want ErrLockNotHeld", err)
		}
		if _, tok := lockValue(t, b, "k"); tok != a {
			t.Fatal("another token's Release changed the lock")
		}
		if err := l.Release(ctx, "k", a, []byte("result"), time.Minute); err != nil {
			t.Fatalf("Release = %v", err)
		}
		// The result replaced the lock in the same key.
		if got := b.rdb.Get(ctx, key).Val(); got != "result" {
			t.Fatalf("after Release the key holds %q, want the result", got)
		}
		if ttl := b.rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
			t.Fatalf("cached result PTTL = %s, want in (0, 1m]", ttl)
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
		if got := b.rdb.Get(ctx, key).Val(); got != "result" {
			t.Fatalf("Acquire of a cached key changed it to %q", got)
		}

		// Results that look like a lock, or like the escape, or are empty, round-trip.
		for i, r := range []string{"L123:" + c, "E", "Ex", "", "\x01cached"} {
			k := "esc" + strconv.Itoa(i)
			if _, err := l.Acquire(ctx, k, a, time.Minute); err != nil {
				t.Fatal(err)
			}
			must(t, l.Release(ctx, k, a, []byte(r), time.Minute))
			v, err := l.Acquire(ctx, k, c, time.Minute)
			if err != nil || v == nil || string(v) != r {
				t.Fatalf("cached %q came back as %q (nil %v), %v", r, v, v == nil, err)
			}
		}
		if got := b.rdb.Get(ctx, b.prefix+"{esc4}").Val(); got != "\x01cached" {
			t.Fatalf("a result starting with a format byte is stored as %q, want it as is", got)
		}
	})
}

func TestLockerReleaseCachesWhoeverHoldsTheLock(t *testing.T) {
	eachMode(t, func(t *testing.T, l *lock.Locker, b *bundle) {
		ctx := testCtx(t)
		a, c := token(), token()
		if _, err := l.Acquire(ctx, "k", a, time.Minute); err != nil {
			t.Fatal(err)
		}
		// c never held the lock: its result (a finished, committed answer) replaces a's lock.
		if err := l.Release(ctx, "k", c, []byte("late"), time.Minute); !errors.Is(err, idemkit.ErrLockNotHeld) {
			t.Fatalf("Release by a non-holder = %v; want ErrLockNotHeld", err)
		}
		if v, err := l.Acquire(ctx, "k", token(), time.Minute); err != nil || string(v) != "late" {
			t.Fatalf("Acquire = %q, %v; want the cached \"late\"", v, err)
		}
		// a's release without a result then leaves the cached result alone.
		if err := l.Release(ctx, "k", a, nil, 0); !errors.Is(err, idemkit.ErrLockNotHeld) {
			t.Fatalf("holder's Release after the fill = %v; want ErrLockNotHeld", err)
		}
		if got := b.rdb.Get(ctx, b.prefix+"{k}").Val(); got != "late" {
			t.Fatalf("a Release without result removed the cached result: key holds %q", got)
		}
		// A fill on an empty key (the lock expired) caches and reports the lock gone.
		if err := l.Release(ctx, "gone", a, []byte("r"), time.Minute); !errors.Is(err, idemkit.ErrLockNotHeld) {
			t.Fatalf("Release of an expired lock = %v; want ErrLockNotHeld", err)
		}
		if v, err := l.Acquire(ctx, "gone", c, time.Minute); err != nil || string(v) != "r" {
			t.Fatalf("Acquire after a fill of an empty key = %q, %v", v, err)
		}
		// Without a cache TTL nothing is cached: the lock is deleted.
		if _, err := l.Acquire(ctx, "n", a, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx, "n", a, []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		if n := b.rdb.Exists(ctx, b.prefix+"{n}").Val(); n != 0 {
			t.Fatal("Release with cacheTTL 0 left the key")
		}
	})
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
	if n := b.rdb.Exists(testCtx(t), b.prefix+"{k}").Val(); n != 0 {
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
// EVALSHA to EVAL and works; native commands need no script. It flushes a private server, not the
// shared one other tests count commands on.
func TestLockerScriptFlush(t *testing.T) {
	_, rdb := privateRedis(t)
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
	want := func(op string, cmds ...string) {
		t.Helper()
		if got := counter.take(); !slices.Equal(got, cmds) {
			t.Fatalf("%s sent %v; want %v", op, got, cmds)
		}
	}

	l := lock.New(rdb, nil)
	tok := token()
	flush()
	if _, err := l.Acquire(ctx, "k", tok, time.Minute); err != nil {
		t.Fatalf("Acquire after SCRIPT FLUSH = %v", err)
	}
	want("Acquire (native)", "set")
	if err := l.Refresh(ctx, "k", tok, time.Minute); err != nil {
		t.Fatalf("Refresh after SCRIPT FLUSH = %v", err)
	}
	want("Refresh after SCRIPT FLUSH", "evalsha", "eval")
	if err := l.Refresh(ctx, "k", tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	want("Refresh with the script cached", "evalsha")
	flush()
	if err := l.Release(ctx, "k", tok, nil, 0); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH = %v", err)
	}
	want("Release without result after SCRIPT FLUSH", "evalsha", "eval")
	if _, err := l.Acquire(ctx, "k", tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	flush()
	if err := l.Release(ctx, "k", tok, []byte("r"), time.Minute); err != nil {
		t.Fatalf("Release with result = %v", err)
	}
	want("Release with a result (native)", "set")
	if v, err := l.Acquire(ctx, "k", token(), time.Minute); err != nil || string(v) != "r" {
		t.Fatalf("Acquire = %q, %v; want the cached \"r\"", v, err)
	}
	want("cached Acquire", "set")

	// The script fallback after SCRIPT FLUSH.
	s := lock.New(rdb, &lock.Options{Scripts: true, Prefix: "scripts:"})
	flush()
	if _, err := s.Acquire(ctx, "k", tok, time.Minute); err != nil {
		t.Fatalf("Acquire after SCRIPT FLUSH = %v", err)
	}
	want("scripted Acquire after SCRIPT FLUSH", "evalsha", "eval")
	flush()
	if err := s.Release(ctx, "k", tok, []byte("r"), time.Minute); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH = %v", err)
	}
	want("scripted Release after SCRIPT FLUSH", "evalsha", "eval")
	if v, err := s.Acquire(ctx, "k", token(), time.Minute); err != nil || string(v) != "r" {
		t.Fatalf("Acquire = %q, %v; want the cached \"r\"", v, err)
	}
	want("scripted Acquire (its script flushed with the Release's)", "evalsha", "eval")
	if v, err := s.Acquire(ctx, "k", token(), time.Minute); err != nil || string(v) != "r" {
		t.Fatalf("Acquire = %q, %v; want the cached \"r\"", v, err)
	}
	want("scripted Acquire, script cached", "evalsha")
}
