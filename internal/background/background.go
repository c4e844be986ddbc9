// Package background runs the bounded follow-up work the Guard and dtmhttp start after a caller has
// its answer (releasing a lock whose Acquire reply was lost, retrying a release that failed, watching
// for a claim that lands late).
package background

import (
	"context"
	"sync"
	"time"
)

// Limit runs such work on goroutines of its own, at most Max at once; more is dropped. The zero value
// is not usable: set Max.
type Limit struct {
	Max int32

	mu   sync.Mutex
	n    int32         // goroutines started and not yet returned
	idle chan struct{} // closed when n last fell to zero; nil before anything ran
}

// Go runs f on a goroutine with a context that keeps parent's values, not its cancellation, and
// ends after d, and reports whether it did: false when Max goroutines already run.
func (l *Limit) Go(parent context.Context, d time.Duration, f func(ctx context.Context)) bool {
	l.mu.Lock()
	if l.n >= l.Max {
		l.mu.Unlock()
		return false
	}
	if l.n++; l.n == 1 {
		l.idle = make(chan struct{})
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), d)
	go func() {
		defer l.ended()
		defer cancel()
		f(ctx)
	}()
	return true
}

// ended notes that a goroutine started by Go returned.
func (l *Limit) ended() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n--; l.n == 0 {
		close(l.idle)
	}
}

// Running returns the number of goroutines started by Go that have not returned.
func (l *Limit) Running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.n)
}

// Wait waits until none of the goroutines started by Go runs, or ctx ends (its error returned). Work
// started while it waits is waited for too, unless all of it ended at some moment in between.
func (l *Limit) Wait(ctx context.Context) error {
	l.mu.Lock()
	n, idle := l.n, l.idle
	l.mu.Unlock()
	if n == 0 {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WaitAll waits until none of the goroutines of ls runs, or ctx ends (its error returned): it waits
// for each in turn, until a pass finds all idle, since the work of one may start another's.
func WaitAll(ctx context.Context, ls ...*Limit) error {
	for busy := true; busy; {
		busy = false
		for _, l := range ls {
			if l.Running() == 0 {
				continue
			}
			busy = true
			if err := l.Wait(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// Retry runs f as Go does, after a pause of 10 ms and then again after pauses that double up to a
// second, until f reports that it is done or d is over: the retry of a write that failed (a lock
// release on a connection Redis dropped, a record's finish the database was too slow for), which
// would otherwise be left undone. It reports whether it started, as Go.
func (l *Limit) Retry(parent context.Context, d time.Duration, f func(ctx context.Context) (done bool)) bool {
	return l.Go(parent, d, func(ctx context.Context) {
		for wait := 10 * time.Millisecond; Sleep(ctx, wait); wait = min(2*wait, time.Second) {
			if f(ctx) {
				return
			}
		}
	})
}

// Sleep waits d, or until ctx ends; it reports whether it waited d.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Settling returns a context with ctx's values for work that must finish whether or not the caller
// still waits (following a global transaction's outcome, settling its record), and its cancel. It
// survives ctx's cancellation yet can be cancelled itself, which matters: Claim.Finish bounds its
// writes by Options.FinishTimeout only on a context that can end, and takes one that never can as is.
func Settling(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(context.WithoutCancel(ctx))
}
