package sweep_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/sweep"
)

var _ sweep.Target = (*memory.Store)(nil)

func TestSweeperRecoversAndDeletes(t *testing.T) {
	clk := idemtest.NewClock()
	store := memory.NewStore()
	g, err := idemkit.New(store, &idemkit.Options{Lease: time.Second, TTL: time.Hour, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A holder that died mid-request, and a finished record.
	stale, _, err := g.Begin(ctx, idemkit.Call{Scope: "s", Key: "dead"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(ctx, idemkit.Call{Scope: "s", Key: "done"}, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	sw, err := sweep.New(&sweep.Options{Now: clk.Now, BatchSize: 1}, sweep.RecordTasks(store)...)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	stats, err := sw.RunOnce(ctx)
	if err != nil || stats["recover_stale"] != 1 || stats["delete_expired"] != 0 {
		t.Fatalf("first pass: %v %v", stats, err)
	}
	rec, _ := g.Get(ctx, "s", "dead")
	if rec.Status != idemkit.StatusFailed || rec.Fence != 2 {
		t.Fatalf("recovered record %+v", rec)
	}
	if _, err := stale.Finish(ctx, []byte("late"), nil); !errors.Is(err, idemkit.ErrFenced) {
		t.Fatalf("the dead holder's finish: %v, want ErrFenced", err)
	}
	clk.Advance(time.Hour)
	stats, err = sw.RunOnce(ctx)
	if err != nil || stats["delete_expired"] != 2 {
		t.Fatalf("second pass: %v %v", stats, err)
	}
	if store.Len() != 0 {
		t.Fatalf("%d records left", store.Len())
	}
}

func TestSweeperIsExclusive(t *testing.T) {
	locker := memory.NewLocker(nil)
	var running, overlaps atomic.Int32
	task := sweep.Task{Name: "slow", Run: func(ctx context.Context, now time.Time, limit int) (int, error) {
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		time.Sleep(20 * time.Millisecond)
		running.Add(-1)
		return 0, nil
	}}
	a, _ := sweep.New(&sweep.Options{Locker: locker}, task)
	b, _ := sweep.New(&sweep.Options{Locker: locker}, task)
	errs := make(chan error, 2)
	for _, s := range []*sweep.Sweeper{a, b} {
		go func() { _, err := s.RunOnce(context.Background()); errs <- err }()
	}
	e1, e2 := <-errs, <-errs
	if overlaps.Load() != 0 {
		t.Fatal("two sweepers ran at once")
	}
	if !(e1 == nil && errors.Is(e2, sweep.ErrSkipped) || e2 == nil && errors.Is(e1, sweep.ErrSkipped)) {
		// Both may also succeed one after the other if the first finished before the second began.
		if e1 != nil || e2 != nil {
			t.Fatalf("results %v, %v", e1, e2)
		}
	}
}

func TestSweeperBoundsBatchesAndReportsErrors(t *testing.T) {
	var calls atomic.Int32
	full := sweep.Task{Name: "full", Run: func(ctx context.Context, now time.Time, limit int) (int, error) {
		calls.Add(1)
		return limit, nil // always a full batch: only MaxBatches stops it
	}}
	boom := errors.New("db down")
	failing := sweep.Task{Name: "failing", Run: func(context.Context, time.Time, int) (int, error) { return 0, boom }}
	s, err := sweep.New(&sweep.Options{BatchSize: 10, MaxBatches: 3}, full, failing)
	if err != nil {
		t.Fatal(err)
	}
	stats, err := s.RunOnce(context.Background())
	if calls.Load() != 3 || stats["full"] != 30 || !errors.Is(err, boom) {
		t.Fatalf("calls %d, stats %v, err %v", calls.Load(), stats, err)
	}
}

func TestStartClose(t *testing.T) {
	var passes atomic.Int32
	task := sweep.Task{Name: "count", Run: func(context.Context, time.Time, int) (int, error) { passes.Add(1); return 0, nil }}
	s, err := sweep.New(&sweep.Options{Interval: 5 * time.Millisecond}, task)
	if err != nil {
		t.Fatal(err)
	}
	s.Start(context.Background())
	s.Start(context.Background()) // no second goroutine
	deadline := time.Now().Add(10 * time.Second)
	for passes.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	n := passes.Load()
	time.Sleep(20 * time.Millisecond)
	if passes.Load() != n || n < 3 {
		t.Fatalf("passes %d then %d: the sweeper did not run or did not stop", n, passes.Load())
	}
	_ = s.Close()
}

func TestNewValidates(t *testing.T) {
	if _, err := sweep.New(nil); err == nil {
		t.Fatal("no tasks accepted")
	}
	if _, err := sweep.New(&sweep.Options{BatchSize: -1}, sweep.Task{Name: "x", Run: func(context.Context, time.Time, int) (int, error) { return 0, nil }}); err == nil {
		t.Fatal("negative batch accepted")
	}
	if _, err := sweep.New(&sweep.Options{LockTimeout: -time.Second}, sweep.Task{Name: "x", Run: func(context.Context, time.Time, int) (int, error) { return 0, nil }}); err == nil {
		t.Fatal("negative LockTimeout accepted")
	}
}

// TestStartAfterContextEnded: a Sweeper whose context was cancelled starts again (issue 11, item 9);
// before, Start did nothing and the sweeper stayed dead.
func TestStartAfterContextEnded(t *testing.T) {
	var passes atomic.Int32
	sw, err := sweep.New(&sweep.Options{Interval: time.Millisecond}, sweep.Task{Name: "count", Run: func(context.Context, time.Time, int) (int, error) {
		passes.Add(1)
		return 0, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	sw.Start(ctx)
	waitFor(t, func() bool { return passes.Load() > 0 })
	cancel()
	sw.Start(context.Background())
	n := passes.Load()
	waitFor(t, func() bool { return passes.Load() > n+2 })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// downLocker is a Locker whose Redis is down.
type downLocker struct{}

var errRedisDown = errors.New("dial tcp 127.0.0.1:6379: connection refused")

func (downLocker) Acquire(context.Context, string, string, time.Duration) ([]byte, error) {
	return nil, errRedisDown
}
func (downLocker) Refresh(context.Context, string, string, time.Duration) error { return errRedisDown }
func (downLocker) Release(context.Context, string, string, []byte, time.Duration) error {
	return errRedisDown
}

// TestSweeperRunsWithoutItsLock: the lock only saves work, so a pass that cannot reach the Locker
// sweeps anyway — stuck claims are recovered through a Redis outage (every pass failed before).
func TestSweeperRunsWithoutItsLock(t *testing.T) {
	var calls atomic.Int32
	task := sweep.Task{Name: "t", Run: func(context.Context, time.Time, int) (int, error) { calls.Add(1); return 1, nil }}
	s, err := sweep.New(&sweep.Options{Locker: downLocker{}}, task)
	if err != nil {
		t.Fatal(err)
	}
	stats, err := s.RunOnce(context.Background())
	if err != nil || calls.Load() != 1 || stats["t"] != 1 {
		t.Fatalf("a pass with the Locker down: %v, %v, %d calls; want it to sweep", stats, err, calls.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.RunOnce(ctx); err == nil {
		t.Fatal("a cancelled pass swept")
	}
}

// lostReplyLocker takes the lock in its Locker and then reports the Acquire failed, as a reply lost
// to a read timeout does.
type lostReplyLocker struct{ idemkit.Locker }

func (l lostReplyLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	if _, err := l.Locker.Acquire(ctx, key, token, ttl); err != nil {
		return nil, err
	}
	return nil, errors.New("read tcp 127.0.0.1:6379: i/o timeout")
}

// TestSweeperReleasesALockWhoseReplyWasLost: a pass whose Acquire took the lock but lost its reply
// sweeps without the lock and still frees it afterwards, so other instances' passes are not skipped
// until the lock's TTL (Interval) runs out.
func TestSweeperReleasesALockWhoseReplyWasLost(t *testing.T) {
	locker := memory.NewLocker(nil)
	task := sweep.Task{Name: "t", Run: func(context.Context, time.Time, int) (int, error) { return 0, nil }}
	a, err := sweep.New(&sweep.Options{Locker: lostReplyLocker{locker}, Interval: time.Hour}, task)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.RunOnce(context.Background()); err != nil {
		t.Fatalf("a pass whose lock reply was lost: %v; want it to sweep", err)
	}
	b, _ := sweep.New(&sweep.Options{Locker: locker, Interval: time.Hour}, task)
	if _, err := b.RunOnce(context.Background()); err != nil {
		t.Fatalf("the next instance's pass: %v; want the lock free", err)
	}
}

// TestSweeperHoldsItsLockThroughALongPass: the sweeper lock lives Interval; a pass that runs longer
// (a large backlog of expired records, a reconciler waiting on DTM) must keep it, or another instance
// starts a pass beside it, which Options.Locker says cannot happen.
func TestSweeperHoldsItsLockThroughALongPass(t *testing.T) {
	const interval = 300 * time.Millisecond
	locker := memory.NewLocker(nil)
	started, finish := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	task := sweep.Task{Name: "long", Run: func(ctx context.Context, _ time.Time, _ int) (int, error) {
		if runs.Add(1) == 1 { // the first pass's only batch outlives the lock's TTL
			close(started)
			<-finish
		}
		return 0, nil
	}}
	a, _ := sweep.New(&sweep.Options{Locker: locker, Interval: interval}, task)
	b, _ := sweep.New(&sweep.Options{Locker: locker, Interval: interval}, task)
	errs := make(chan error, 1)
	go func() { _, err := a.RunOnce(context.Background()); errs <- err }()
	<-started
	time.Sleep(4 * interval) // the pass goes on past the TTL it took the lock with
	_, errB := b.RunOnce(context.Background())
	close(finish)
	if err := <-errs; err != nil {
		t.Fatalf("the long pass: %v", err)
	}
	if !errors.Is(errB, sweep.ErrSkipped) || runs.Load() != 1 {
		t.Fatalf("another instance's pass during a long one: %v (%d task runs); want ErrSkipped", errB, runs.Load())
	}
	if _, err := b.RunOnce(context.Background()); err != nil {
		t.Fatalf("a pass after the long one ended: %v; want the lock released", err)
	}
}
