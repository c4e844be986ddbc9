package sweep_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/sweep"
)

// callsLocker counts the calls made to its Locker after armed is set, and closes entered at the first.
type callsLocker struct {
	idemkit.Locker
	armed   atomic.Bool
	entered chan struct{}
	once    atomic.Bool
}

func (l *callsLocker) enter() {
	if l.armed.Load() && l.once.CompareAndSwap(false, true) {
		close(l.entered)
	}
}

func (l *callsLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	l.enter()
	return l.Locker.Acquire(ctx, key, token, ttl)
}

func (l *callsLocker) Refresh(ctx context.Context, key, token string, ttl time.Duration) error {
	l.enter()
	return l.Locker.Refresh(ctx, key, token, ttl)
}

// TestCloseWithRedisStalled: a Sweeper whose Redis stopped answering (a frozen server, a network
// that drops packets) took about 15 s to Close: the pass's call to the Locker waited for go-redis's
// read timeout (5 s: a cancelled context without a deadline does not end its socket I/O), the release
// of the sweeper lock 5 s more, and the loop, finding its ticker and its cancelled context both ready,
// could start another pass, whose release waited again. Each Locker call now has a deadline
// (Options.LockTimeout) and a cancelled loop starts no pass: Close returns within the bound its doc
// states, and leaves no goroutine of the Sweeper behind.
func TestCloseWithRedisStalled(t *testing.T) {
	srv := testsvc.StartRedis(t) // private: stalling the shared one would stall every other test
	px := testsvc.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true}) // as lock's doc says
	t.Cleanup(func() { _ = rdb.Close() })
	lk := &callsLocker{Locker: lock.New(rdb, &lock.Options{Prefix: testsvc.Name("idemkit-test-") + ":"}), entered: make(chan struct{})}
	var passes atomic.Int32
	task := sweep.Task{Name: "count", Run: func(context.Context, time.Time, int) (int, error) { passes.Add(1); return 0, nil }}
	sw, err := sweep.New(&sweep.Options{Locker: lk, Interval: 20 * time.Millisecond}, task)
	if err != nil {
		t.Fatal(err)
	}
	sw.Start(context.Background())
	waitFor(t, func() bool { return passes.Load() >= 2 }) // swept with the lock: Redis answered
	px.Stall()
	lk.armed.Store(true)
	select {
	case <-lk.entered: // a call to the stalled Redis is out
	case <-time.After(10 * time.Second):
		t.Fatal("the sweeper made no Locker call in 10s")
	}
	time.Sleep(50 * time.Millisecond) // let it reach the socket
	closed := make(chan error, 1)
	go func() { closed <- sw.Close() }()
	// The bound: far above what Close takes now (twice DefaultLockTimeout: 2 s), far below the 15 s it took.
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(6 * time.Second):
		t.Fatal("Close has not returned 6s after Redis stalled under a pass")
	}
	noSweeperGoroutineOutlives(t)
}

// noSweeperGoroutineOutlives fails t if a goroutine of the Sweeper still runs a second after Close
// returned. Close returns once the loop closed its done channel, which its deferred calls do last:
// the goroutine may still be on its way out (seen in CI, runnable at loop's closing brace), so it
// gets a moment to go.
func noSweeperGoroutineOutlives(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
		left := sweeperGoroutines()
		if left == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a goroutine of the Sweeper outlived Close:\n%s", left)
		}
	}
}

// sweeperGoroutines returns the stacks of running goroutines that are in package sweep's code.
func sweeperGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "idemkit/sweep.(*Sweeper)") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// releaseSignal closes entered when its Locker's Release is first called.
type releaseSignal struct {
	idemkit.Locker
	entered chan struct{}
	once    atomic.Bool
}

func (l *releaseSignal) Release(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	if l.once.CompareAndSwap(false, true) {
		close(l.entered)
	}
	return l.Locker.Release(ctx, key, token, result, ttl)
}

// TestCloseDuringRecoveryWithRedisStalled: RecordTasksWithLocker's recover_stale releases the locks of
// the claims it recovers on the pass's context. With Redis stalled, a release under way when Close
// cancelled that context waited for the client's read timeout (here 30 s, a client configured for slow
// commands), and Close with it. Each release now has a deadline (DefaultLockTimeout).
func TestCloseDuringRecoveryWithRedisStalled(t *testing.T) {
	srv := testsvc.StartRedis(t)
	px := testsvc.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true, ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	lk := &releaseSignal{Locker: lock.New(rdb, &lock.Options{Prefix: testsvc.Name("idemkit-test-") + ":"}), entered: make(chan struct{})}
	clk := idemtest.NewClock()
	store := memory.NewStore()
	g, err := idemkit.New(store, &idemkit.Options{Locker: lk, Lease: time.Second, LockTTL: time.Hour, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"dead-1", "dead-2", "dead-3"} { // holders that died holding their locks
		if _, _, err := g.Begin(context.Background(), idemkit.Call{Scope: "s", Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Second)
	sw, err := sweep.New(&sweep.Options{Now: clk.Now, Interval: time.Hour}, sweep.RecordTasksWithLocker(store, lk)...)
	if err != nil {
		t.Fatal(err)
	}
	px.Stall()
	sw.Start(context.Background())
	select {
	case <-lk.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("recover_stale released no lock in 10s")
	}
	time.Sleep(50 * time.Millisecond) // let it reach the socket
	closed := make(chan error, 1)
	go func() { closed <- sw.Close() }()
	// The bound: far above DefaultLockTimeout (1 s), far below the client's 30 s read timeout.
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close has not returned 5s after it was called, a lock release out on a stalled Redis")
	}
	noSweeperGoroutineOutlives(t)
}
