// Package sweep runs housekeeping over idemkit's tables in the background: it deletes expired records,
// recovers PROCESSING records whose holder died (FAILED, fence + 1, so the holder can never finish them
// and the next attempt may run; with [RecordTasksWithLocker], the lock the dead holder still holds is
// released too), and deletes old barrier rows — in bounded batches, on one instance at a time across
// processes when given a shared Locker.
package sweep

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

// Defaults of [Options].
const (
	DefaultInterval   = time.Minute
	DefaultBatchSize  = 500
	DefaultMaxBatches = 100
	DefaultLockKey    = "sweep"
	// DefaultLockTimeout is the default of Options.LockTimeout.
	DefaultLockTimeout = time.Second
)

// Target is a record store the sweeper can clean: record.Store and memory.Store implement it.
type Target interface {
	// DeleteExpired deletes up to limit records expired at now and returns how many.
	DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error)
	// RecoverStale marks up to limit lease-expired PROCESSING records without a GID FAILED (fence+1)
	// and returns how many.
	RecoverStale(ctx context.Context, now time.Time, limit int) (int, error)
}

// Task is one kind of cleanup, run in batches of at most limit rows until a batch comes back short.
type Task struct {
	Name string
	Run  func(ctx context.Context, now time.Time, limit int) (int, error)
}

// ClaimRecoverer is a Target that reports the claims it recovers (record.Store and memory.Store
// implement it), so that [RecordTasksWithLocker] can release their holders' locks.
type ClaimRecoverer interface {
	// RecoverStaleClaims does what RecoverStale does and returns the claims it recovered as they
	// were: Scope, Key, Fence and Owner (the holder's lock token) at least.
	RecoverStaleClaims(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error)
}

// maxReleaseFailures is how many lock releases in a row may fail before a recover_stale run of
// [RecordTasksWithLocker] stops releasing.
const maxReleaseFailures = 3

// RecordTasks returns the tasks for a record store: "delete_expired" and "recover_stale". A recovered
// claim's holder may still hold its lock (a Guard whose LockTTL is longer than its Lease): its key then
// answers in flight until the lock expires; [RecordTasksWithLocker] releases it.
func RecordTasks(t Target) []Task {
	return []Task{{Name: "delete_expired", Run: t.DeleteExpired}, {Name: "recover_stale", Run: t.RecoverStale}}
}

// RecordTasksWithLocker is [RecordTasks] for the Guards whose Locker is lk. When t is a
// [ClaimRecoverer], recover_stale also releases the lock of every claim it recovers that its dead
// holder still holds, by the holder's token (the record's owner): with a LockTTL longer than the Lease
// that lock would otherwise answer every retry of the key in flight until it expires, and once the
// record is recovered nothing names its holder any more (idemctl cannot release it). A lock another
// attempt holds is left alone. The recovery counts even when a release fails (the lock then expires by
// itself): the task reports the failure as its error after releasing the others, and as for any task
// error the pass leaves the rest of recover_stale to the next one. Each release has a deadline,
// DefaultLockTimeout (1s): a cancellation alone does not end a go-redis command on a Redis that
// stopped answering, and [Sweeper.Close] cancels a pass. After 3 failed releases in a row it releases
// no more in that run: the remaining locks expire by themselves. With a nil lk, or a t that is no
// ClaimRecoverer, it returns RecordTasks(t).
func RecordTasksWithLocker(t Target, lk idemkit.Locker) []Task {
	cr, ok := t.(ClaimRecoverer)
	if lk == nil || !ok {
		return RecordTasks(t)
	}
	recoverStale := func(ctx context.Context, now time.Time, limit int) (int, error) {
		recs, err := cr.RecoverStaleClaims(ctx, now, limit)
		var errs []error
		failed := 0 // releases in a row the Locker failed
		for i, r := range recs {
			if r.Owner == "" {
				continue
			}
			if failed == maxReleaseFailures {
				// A Locker that hangs makes every release wait for its deadline: the pass would be
				// held for that long per recovered claim. The rest expire by themselves.
				errs = append(errs, fmt.Errorf("sweep: the Locker failed %d lock releases in a row: the locks of the other %d recovered claims were not released (they expire by themselves)",
					failed, len(recs)-i))
				break
			}
			rctx, cancel := context.WithTimeout(ctx, DefaultLockTimeout)
			rerr := lk.Release(rctx, idemkit.LockKey(r.Scope, r.Key), r.Owner, nil, 0)
			cancel()
			switch {
			case rerr == nil, errors.Is(rerr, idemkit.ErrLockNotHeld):
				failed = 0
			default:
				failed++
				errs = append(errs, fmt.Errorf("releasing the lock of the recovered claim on %q / %q: %w", r.Scope, r.Key, rerr))
			}
		}
		return len(recs), errors.Join(append([]error{err}, errs...)...)
	}
	return []Task{{Name: "delete_expired", Run: t.DeleteExpired}, {Name: "recover_stale", Run: recoverStale}}
}

// Options configure a [Sweeper]. The zero value works.
type Options struct {
	// Interval between passes. Defaults to DefaultInterval (1m).
	Interval time.Duration
	// BatchSize is the most rows one statement touches. Defaults to DefaultBatchSize (500).
	BatchSize int
	// MaxBatches bounds the batches of one task in one pass. Defaults to DefaultMaxBatches (100).
	MaxBatches int
	// Locker, when set, makes passes exclusive across every sweeper sharing it and LockKey: a pass
	// that finds the lock held is skipped; one that cannot reach the Locker sweeps without it (logged
	// at warn). The lock is taken for Interval and refreshed every third of it while the pass runs.
	// Defaults to none (every instance sweeps; still correct, since every statement re-checks its
	// conditions, only wasteful).
	Locker idemkit.Locker
	// LockKey names the lock. Defaults to DefaultLockKey.
	LockKey string
	// LockTimeout bounds each call to the Locker: taking, refreshing and releasing the sweeper lock. A
	// call that runs out of it counts as a Locker that cannot be reached (a pass then sweeps without
	// the lock). Only a deadline ends a go-redis command on a Redis that stopped answering (with
	// ContextTimeoutEnabled, as package lock asks for; a cancellation does not), so LockTimeout is also
	// what bounds [Sweeper.Close] then. Defaults to DefaultLockTimeout (1s); negative is an error.
	LockTimeout time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger receives a line per pass that did something, and errors. Defaults to discarding.
	Logger *slog.Logger
}

// Stats counts what a pass did, per task name.
type Stats map[string]int

// Sweeper runs tasks every Interval. Create it with [New], start it with [Sweeper.Start] or drive it
// with [Sweeper.RunOnce]; it is safe for concurrent use.
type Sweeper struct {
	opts  Options
	tasks []Task

	mu     sync.Mutex
	ctx    context.Context // the running loop's
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Sweeper over tasks. It returns an error when there are no tasks or an option is
// invalid.
func New(opts *Options, tasks ...Task) (*Sweeper, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Interval = cmp.Or(o.Interval, DefaultInterval)
	o.BatchSize = cmp.Or(o.BatchSize, DefaultBatchSize)
	o.MaxBatches = cmp.Or(o.MaxBatches, DefaultMaxBatches)
	o.LockKey = cmp.Or(o.LockKey, DefaultLockKey)
	o.LockTimeout = cmp.Or(o.LockTimeout, DefaultLockTimeout)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case len(tasks) == 0:
		return nil, errors.New("sweep: no tasks")
	case o.Interval < time.Millisecond:
		return nil, fmt.Errorf("sweep: Interval must be at least 1ms, got %s", o.Interval)
	case o.BatchSize < 1 || o.MaxBatches < 1:
		return nil, fmt.Errorf("sweep: BatchSize and MaxBatches must be positive, got %d and %d", o.BatchSize, o.MaxBatches)
	case o.LockTimeout < 0:
		return nil, fmt.Errorf("sweep: LockTimeout must not be negative, got %s", o.LockTimeout)
	}
	for _, t := range tasks {
		if t.Name == "" || t.Run == nil {
			return nil, errors.New("sweep: a task needs a Name and a Run function")
		}
	}
	return &Sweeper{opts: o, tasks: tasks}, nil
}

// ErrSkipped is returned by RunOnce when another instance holds the sweeper lock.
var ErrSkipped = errors.New("sweep: another instance is sweeping")

// RunOnce runs one pass now: every task in batches until a batch comes back short or MaxBatches is
// reached (a full batch that also returned an error goes on: a reconciler reports a record it cannot
// settle after settling the others). It returns what each task did, ErrSkipped when another instance
// holds the lock, or the tasks' errors joined (a failing task does not stop the others). On a context already ended it
// returns its error and does nothing.
func (s *Sweeper) RunOnce(ctx context.Context) (Stats, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	if lk := s.opts.Locker; lk != nil {
		var b [16]byte
		_, _ = rand.Read(b[:])
		token := hex.EncodeToString(b[:])
		actx, cancel := context.WithTimeout(ctx, s.opts.LockTimeout)
		_, err := lk.Acquire(actx, s.opts.LockKey, token, s.opts.Interval)
		cancel()
		switch {
		case errors.Is(err, idemkit.ErrLocked):
			return nil, ErrSkipped
		case err != nil && ctx.Err() != nil:
			s.release(ctx, lk, token) // the lock may have been taken all the same
			return nil, fmt.Errorf("sweep: taking the sweeper lock: %w", err)
		case err != nil:
			// The lock only saves work (every statement re-checks its conditions): a Redis outage
			// must not stop stuck claims from being recovered. Sweep without it. An Acquire whose
			// reply was lost may have taken the lock all the same: the release after the pass frees
			// it (a release by a token that holds nothing changes nothing).
			s.opts.Logger.WarnContext(ctx, "idemkit sweep: the sweeper lock is unavailable; sweeping without it", "error", err)
			defer s.release(ctx, lk, token)
		default:
			defer s.release(ctx, lk, token)
			// The lock lives Interval; a pass may take longer (a backlog, a reconciler waiting on
			// its manager). Keep it until the pass ends (deferred before the release: stopped first).
			defer s.keep(ctx, lk, token)()
		}
	}
	stats := make(Stats, len(s.tasks))
	var errs []error
	for _, t := range s.tasks {
		var last string // the task's latest error, reported once however many batches repeat it
		for range s.opts.MaxBatches {
			n, err := t.Run(ctx, s.opts.Now(), s.opts.BatchSize)
			stats[t.Name] += n
			if err != nil && err.Error() != last {
				last = err.Error()
				errs = append(errs, fmt.Errorf("sweep: %s: %w", t.Name, err))
			}
			// A full batch goes on, also beside an error: a reconciler reports the records it must
			// leave to an operator on every pass, after settling the others, and stopping there
			// would settle one batch of a backlog per Interval.
			if n < s.opts.BatchSize || ctx.Err() != nil {
				break
			}
		}
	}
	return stats, errors.Join(errs...)
}

// keep refreshes the sweeper lock token holds every third of Interval until the returned function is
// called, which waits for it to stop. A lock found lost (expired, taken by another instance) is not
// refreshed again; a Locker error is retried at the next tick.
func (s *Sweeper) keep(ctx context.Context, lk idemkit.Locker, token string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(max(s.opts.Interval/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, s.opts.LockTimeout)
			err := lk.Refresh(rctx, s.opts.LockKey, token, s.opts.Interval)
			rcancel()
			if err != nil && ctx.Err() == nil {
				s.opts.Logger.WarnContext(ctx, "idemkit sweep: could not keep the sweeper lock", "error", err)
				if errors.Is(err, idemkit.ErrLockNotHeld) {
					return
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// release frees the sweeper lock token may hold, on a context that outlives ctx by LockTimeout.
func (s *Sweeper) release(ctx context.Context, lk idemkit.Locker, token string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.LockTimeout)
	defer cancel()
	_ = lk.Release(rctx, s.opts.LockKey, token, nil, 0)
}

// Start runs a pass every Interval in a goroutine the Sweeper owns, until ctx is done or Close is
// called. Starting a running Sweeper does nothing; one whose context ended, or that was closed, starts
// again.
func (s *Sweeper) Start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		if s.ctx.Err() == nil {
			return // running
		}
		<-s.done // its context ended: wait for its goroutine, then start afresh
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	ctx = s.ctx
	s.done = make(chan struct{})
	go s.loop(ctx, s.done)
}

func (s *Sweeper) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		stats, err := s.RunOnce(ctx)
		switch {
		case errors.Is(err, ErrSkipped), ctx.Err() != nil:
		case err != nil:
			s.opts.Logger.WarnContext(ctx, "idemkit sweep failed", "error", err, "stats", stats)
		default:
			for _, n := range stats {
				if n > 0 {
					s.opts.Logger.InfoContext(ctx, "idemkit sweep", "stats", stats)
					break
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ctx.Err() != nil { // both were ready: select picks at random
				return
			}
		}
	}
}

// Close stops the goroutine started by Start and waits for it. It is safe to call more than once.
//
// A pass under way is cancelled: Close waits for its task to return on its cancelled context and, with
// a Locker, for at most twice Options.LockTimeout more (the call to the Locker under way, then the
// release of the sweeper lock) — 2 s by default on a Redis that stopped answering, where a
// cancellation alone ends no go-redis command. It leaves no goroutine behind.
func (s *Sweeper) Close() error {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel, s.done = nil, nil
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}
