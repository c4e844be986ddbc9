package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/redis/go-redis/v9"
)

// checkInjected fails t unless err is the injected failure, wrapped with what was being done and
// not mistaken for a lock outcome.
func checkInjected(t *testing.T, op string, err error) {
	t.Helper()
	if !errors.Is(err, errInjected) {
		t.Fatalf("%s = %v; want the injected failure", op, err)
	}
	for _, sentinel := range []error{idemkit.ErrLocked, idemkit.ErrInFlight, idemkit.ErrLockNotHeld, idemkit.ErrNotFound} {
		if errors.Is(err, sentinel) {
			t.Fatalf("%s: injected failure %q misreported as %v", op, err, sentinel)
		}
	}
	if !strings.HasPrefix(err.Error(), "lock: ") {
		t.Fatalf("%s: error %q does not say what was being done", op, err)
	}
}

// TestFlakyScripter runs every operation through a client that fails every third script call, and
// checks each outcome against a model of the lock's state: failures come back wrapped, and never
// as "locked" or "not held".
func TestFlakyScripter(t *testing.T) {
	_, b := setup(t)
	ctx := testCtx(t)
	flaky := &flakyScripter{Client: b.rdb, every: 3}
	l := lock.New(flaky, &lock.Options{Prefix: b.prefix})

	for i := range 40 {
		key := fmt.Sprintf("k%d", i)
		a, c := token(), token()
		// a acquires; an injected failure happens before sending, so nothing changed: try again.
		for {
			v, err := l.Acquire(ctx, key, a, time.Minute)
			if err == nil {
				if v != nil {
					t.Fatalf("Acquire of a new key returned a cached %q", v)
				}
				break
			}
			checkInjected(t, "Acquire", err)
		}
		if _, err := l.Acquire(ctx, key, c, time.Minute); err != nil && !errors.Is(err, idemkit.ErrLocked) {
			checkInjected(t, "Acquire of a held key", err)
		}
		if err := l.Refresh(ctx, key, c, time.Minute); err != nil && !errors.Is(err, idemkit.ErrLockNotHeld) {
			checkInjected(t, "Refresh by a non-holder", err)
		} else if err == nil {
			t.Fatal("Refresh by a non-holder succeeded")
		}
		if err := l.Refresh(ctx, key, a, time.Minute); err != nil {
			checkInjected(t, "Refresh", err)
		}
		for {
			err := l.Release(ctx, key, a, []byte(key), time.Minute)
			if err == nil {
				break
			}
			checkInjected(t, "Release", err)
		}
		if v, err := l.Acquire(ctx, key, c, time.Minute); err == nil && string(v) != key {
			t.Fatalf("Acquire after Release = %q; want the cached %q", v, key)
		} else if err != nil {
			checkInjected(t, "Acquire of a cached key", err)
		}
	}
	if flaky.failed.Load() < 20 {
		t.Fatalf("only %d failures injected", flaky.failed.Load())
	}

	// Through a Guard: fail-closed turns every injected failure into ErrLockUnavailable (nothing
	// runs), never ErrInFlight; fail-open runs each key exactly once.
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("FailOpen=%v", failOpen), func(t *testing.T) {
			obs := &events{}
			g := newGuard(t, memory.NewStore(), &idemkit.Options{Locker: l, FailOpen: failOpen, Observer: obs})
			for i := range 30 {
				call := idemkit.Call{Scope: "flaky", Key: fmt.Sprintf("%v-%d", failOpen, i)}
				var runs atomic.Int32
				fn := func(context.Context) ([]byte, error) { runs.Add(1); return []byte("ok"), nil }
				for attempt := 0; ; attempt++ {
					res, err := g.Do(ctx, call, fn)
					if errors.Is(err, idemkit.ErrInFlight) {
						t.Fatalf("%s: injected failure reported as in flight: %v", call.Key, err)
					}
					if err != nil {
						if failOpen || !errors.Is(err, idemkit.ErrLockUnavailable) || !errors.Is(err, errInjected) {
							t.Fatalf("%s: Do = %v", call.Key, err)
						}
						continue
					}
					if string(res.Value) != "ok" {
						t.Fatalf("%s: Do = %q", call.Key, res.Value)
					}
					if attempt > 5 {
						t.Fatalf("%s: took %d attempts", call.Key, attempt)
					}
					break
				}
				if runs.Load() != 1 {
					t.Fatalf("%s: ran %d times", call.Key, runs.Load())
				}
			}
			var failedOpen int
			for _, ev := range obs.take() {
				if ev.FailOpen {
					failedOpen++
				}
			}
			if failOpen != (failedOpen > 0) {
				t.Fatalf("%d fail-open events with FailOpen=%v", failedOpen, failOpen)
			}
		})
	}
}

// privateRedis starts a private redis-server and a client of it that gives up quickly while the
// server is down.
func privateRedis(t *testing.T) (*testsvc.RedisProc, *redis.Client) {
	t.Helper()
	p := testsvc.StartRedis(t)
	o := p.Options()
	o.MaxRetries = 1
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	return p, rdb
}

// waitUp waits (at most 15s) until rdb reaches its server again; go-redis probes a server it
// could not dial about once a second.
func waitUp(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for rdb.Ping(ctx).Err() != nil {
		select {
		case <-ctx.Done():
			t.Fatal("client did not reconnect to the restarted redis-server")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestRedisDown is issue 2's "Redis stopped mid-test": with FailOpen the Store keeps every key to
// one execution and the Guard reports fail-open events; without it every call fails with
// ErrLockUnavailable and nothing runs; after a restart that lost all data, calls work again.
func TestRedisDown(t *testing.T) {
	p, rdb := privateRedis(t)
	ctx := testCtx(t)
	l := &releaseWatch{Locker: lock.New(rdb, nil)}
	store := memory.NewStore()
	obs := &events{}
	open := newGuard(t, store, &idemkit.Options{Locker: l, FailOpen: true, Observer: obs})
	closed := newGuard(t, store, &idemkit.Options{Locker: l, Observer: obs})

	// Warm up while Redis is up: a finished key is cached.
	if _, err := open.Do(ctx, idemkit.Call{Scope: "s", Key: "before"}, func(context.Context) ([]byte, error) {
		return []byte("before"), nil
	}); err != nil {
		t.Fatal(err)
	}
	if res, err := open.Do(ctx, idemkit.Call{Scope: "s", Key: "before"}, nil2); err != nil || !res.Replayed {
		t.Fatalf("replay = %+v, %v", res, err)
	}
	if evs := obs.take(); len(evs) != 2 || !evs[1].Cached || evs[0].FailOpen || evs[1].FailOpen {
		t.Fatalf("events while Redis is up: %+v", evs)
	}

	t.Run("FailOpen/one key", func(t *testing.T) {
		// The holder locks the key in Redis, then Redis dies while its function runs.
		call := idemkit.Call{Scope: "s", Key: "one"}
		var runs atomic.Int32
		inside, finish := make(chan struct{}), make(chan struct{})
		holder := make(chan error, 1)
		go func() {
			_, err := open.Do(l.watch(ctx), call, func(context.Context) ([]byte, error) {
				runs.Add(1)
				close(inside)
				<-finish
				return []byte("one"), nil
			})
			holder <- err
		}()
		<-inside
		p.Stop()

		errs := runConcurrently(63, func(int) error {
			res, err := open.Do(ctx, call, func(context.Context) ([]byte, error) { runs.Add(1); return []byte("dup"), nil })
			if err == nil && (!res.Replayed || string(res.Value) != "one") {
				return fmt.Errorf("duplicate ran or got %+v", res)
			}
			return err
		})
		close(finish)
		errs = append(errs, <-holder)
		for _, err := range errs {
			if err != nil && !errors.Is(err, idemkit.ErrInFlight) {
				t.Errorf("call failed with Redis down and FailOpen: %v", err)
			}
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("function ran %d times, want 1", n)
		}
		evs := obs.take()
		if failedOpen := countFailOpen(evs); len(evs) != 64 || failedOpen != 64 {
			t.Fatalf("%d events, %d of them fail-open; want 64 and 64", len(evs), failedOpen)
		}
	})

	t.Run("FailOpen/50 keys", func(t *testing.T) {
		const keys, perKey = 50, 16
		var runs [keys]atomic.Int32
		errs := runConcurrently(keys*perKey, func(i int) error {
			k := i % keys
			res, err := open.Do(ctx, idemkit.Call{Scope: "s", Key: fmt.Sprintf("many-%d", k)}, func(context.Context) ([]byte, error) {
				runs[k].Add(1)
				return fmt.Appendf(nil, "v%d", k), nil
			})
			if err == nil && string(res.Value) != fmt.Sprintf("v%d", k) {
				return fmt.Errorf("key %d got %q", k, res.Value)
			}
			return err
		})
		for _, err := range errs {
			if err != nil && !errors.Is(err, idemkit.ErrInFlight) {
				t.Errorf("call failed with Redis down and FailOpen: %v", err)
			}
		}
		for k := range runs {
			if n := runs[k].Load(); n != 1 {
				t.Errorf("key %d ran %d times, want 1", k, n)
			}
		}
		evs := obs.take()
		if failedOpen := countFailOpen(evs); len(evs) != keys*perKey || failedOpen != len(evs) {
			t.Fatalf("%d events, %d of them fail-open; want %d and %d", len(evs), failedOpen, keys*perKey, keys*perKey)
		}
	})

	t.Run("FailClosed", func(t *testing.T) {
		var runs atomic.Int32
		fn := func(context.Context) ([]byte, error) { runs.Add(1); return nil, nil }
		errs := runConcurrently(64, func(i int) error {
			// New keys, a key finished before, and one finished while Redis was down.
			key := []string{fmt.Sprintf("closed-%d", i%8), "before", "one"}[i%3]
			_, err := closed.Do(ctx, idemkit.Call{Scope: "s", Key: key}, fn)
			return err
		})
		for _, err := range errs {
			if !errors.Is(err, idemkit.ErrLockUnavailable) || errors.Is(err, idemkit.ErrInFlight) {
				t.Errorf("fail-closed call with Redis down = %v; want ErrLockUnavailable", err)
			}
		}
		if n := runs.Load(); n != 0 {
			t.Fatalf("function ran %d times with Redis down and fail-closed", n)
		}
		if evs := obs.take(); countFailOpen(evs) != 0 {
			t.Fatal("fail-closed calls reported fail-open events")
		}
	})

	t.Run("Restarted", func(t *testing.T) {
		// The holder of "one" finished while Redis was down: its release failed and is retried in
		// the background for FinishTimeout. A retry landing after the restart would cache the
		// result (rightly), and "one" would no longer be replayed from the Store as checked below.
		l.waitRetryEnded(t)
		p.Restart()
		waitUp(t, rdb)
		if n := rdb.DBSize(ctx).Val(); n != 0 {
			t.Fatalf("restarted Redis holds %d keys, want none", n)
		}
		for _, g := range []*idemkit.Guard{closed, open} {
			var runs atomic.Int32
			key := testsvc.Name("after-")
			fn := func(context.Context) ([]byte, error) { runs.Add(1); return []byte("after"), nil }
			if _, err := g.Do(ctx, idemkit.Call{Scope: "s", Key: key}, fn); err != nil {
				t.Fatalf("new key after restart: %v", err)
			}
			if res, err := g.Do(ctx, idemkit.Call{Scope: "s", Key: key}, fn); err != nil || !res.Replayed {
				t.Fatalf("replay after restart = %+v, %v", res, err)
			}
			if runs.Load() != 1 {
				t.Fatalf("ran %d times after restart", runs.Load())
			}
		}
		// A key finished while Redis was down is replayed from the Store, which refills the cache.
		for range 2 {
			if res, err := closed.Do(ctx, idemkit.Call{Scope: "s", Key: "one"}, nil2); err != nil || string(res.Value) != "one" {
				t.Fatalf("replay of a key finished during the outage = %+v, %v", res, err)
			}
		}
		evs := obs.take()
		if countFailOpen(evs) != 0 || len(evs) != 6 || !evs[5].Cached || evs[4].Cached {
			t.Fatalf("events after restart: %+v", evs)
		}
	})
}

// releaseWatch is an idemkit.Locker that follows the releases made on a context from watch: the
// Guard's release of a call made with it and, when that release fails, the Guard's retries of it in
// the background, on a context of their own with the call's values.
type releaseWatch struct {
	idemkit.Locker
	mu      sync.Mutex
	calls   int             // releases on a watched context so far
	running int             // of which still running
	last    context.Context // the context of the latest
}

type watchedKey struct{}

// watch returns ctx marked for the releases of the calls made with it to be followed.
func (w *releaseWatch) watch(ctx context.Context) context.Context {
	return context.WithValue(ctx, watchedKey{}, true)
}

func (w *releaseWatch) Release(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	if ctx.Value(watchedKey{}) == nil {
		return w.Locker.Release(ctx, key, token, result, ttl)
	}
	w.mu.Lock()
	w.calls++
	w.running++
	w.last = ctx
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running--
		w.mu.Unlock()
	}()
	return w.Locker.Release(ctx, key, token, result, ttl)
}

// retryEnded reports whether the watched release failed, was retried, and the retry has given up:
// its context ended, and no release runs. A Release on an ended context sends nothing.
func (w *releaseWatch) retryEnded() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls >= 2 && w.running == 0 && w.last.Err() != nil
}

// waitRetryEnded waits (at most 15s) for retryEnded.
func (w *releaseWatch) waitRetryEnded(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !w.retryEnded() {
		if time.Now().After(deadline) {
			t.Fatal("the failed release was not retried, or its retry did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nil2 is a function for calls that must replay: it fails if it runs.
func nil2(context.Context) ([]byte, error) { return nil, errors.New("must not run") }

func countFailOpen(evs []idemkit.Event) (n int) {
	for _, ev := range evs {
		if ev.FailOpen {
			n++
		}
	}
	return n
}

// runConcurrently runs f(0..n-1) on n goroutines released together and returns their errors.
func runConcurrently(n int, f func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = f(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}
