// Package batch sends concurrent callers' operations together, the way group commit batches database
// commits. The Redis Locker pipelines its native commands with it, and the MySQL record Store turns
// concurrent claims into one multi-row INSERT and concurrent finishes into one transaction.
package batch

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Funcs are what a Batcher does with its operations. Each sets every operation's own outcome (in the
// operation itself: T is a pointer or holds one); a Batcher never reads it.
type Funcs[T any] struct {
	// One runs a lone operation on its caller's context.
	One func(ctx context.Context, op T)
	// Many runs two or more operations that waited together, on the batch context: the first one's
	// values, no cancellation, and the latest deadline among them (see Bound for one without one).
	Many func(ctx context.Context, ops []T)
	// Bound, when positive, stands in for the deadline of a caller whose context has none when a
	// batch forms: its deadline is then Bound after the batch leaves, and the batch still runs until
	// the latest deadline among its callers. Zero leaves a batch with such a caller without a
	// deadline, bounded only by what runs it (a client's read timeout, say).
	Bound time.Duration
	// Fail sets err as the outcome of op when Many panicked (or exited its goroutine) before op was
	// answered; it must leave an op that has its outcome alone.
	Fail func(op T, err error)
	// Abandon, when set, is told of an op whose caller's context ended while it was out in another
	// caller's batch: Do returns ctx's error, and op may still take effect. It is called before that
	// Do returns, with the Batcher's mutex held (it must be quick and must not call the Batcher), and
	// Settle, when set, with op once its batch has returned: from then on op has its outcome, so a
	// caller can order what undoes op after it.
	Abandon, Settle func(op T)
}

// Batcher sends operations at once, on their own, while fewer than max are in flight; otherwise an
// operation waits, and when one in flight returns, every operation that waited meanwhile leaves
// together, sent by the goroutine of the first of them. Under concurrency this turns many round trips
// into one; a lone caller never waits and pays nothing beyond a mutex. While round trips keep ending
// with operations waiting, an operation that could go out alone first yields its processor once
// (runtime.Gosched), and the operations queued meanwhile leave with it: fewer, larger batches under
// load, for the cost of a yield; the first such operation that finds nobody to take along ends this.
//
// Every caller stays bounded by its own context, as with an operation of its own: when it ends while
// the operation waits, the operation is withdrawn and never sent; when it ends while the operation is
// out in another caller's batch, the caller returns at once (the operation may still take effect, as
// one whose reply is abandoned may, and may still be unsent: Funcs.Abandon and Funcs.Settle tell when
// it has its outcome). A batch runs without its callers' cancellation and until the
// latest of their deadlines, so one caller's end never fails another's operation; the caller that
// sends it does so even if its own context ended after the batch formed, and waits for it.
type Batcher[T any] struct {
	f   Funcs[T]
	max int

	mu       sync.Mutex
	inFlight int
	queue    []*waiter[T]
	// contended is set when a round trip ends with operations waiting, and cleared when a caller
	// that yielded before going out alone (see Do) found nobody to take along.
	contended bool
	yield     func()    // runtime.Gosched; a test's hook
	waiters   sync.Pool // of *waiter[T], reused once their caller has its reply or withdrew them
}

// waiter is an operation waiting for its batch.
type waiter[T any] struct {
	ctx context.Context
	op  T
	// wake receives nil when op has been sent and answered, or the batch to send (op first) when
	// this waiter's goroutine is to send it.
	wake chan []*waiter[T]
	// taken and sender are set, under the batcher's mutex, when the waiter leaves the queue in a
	// batch, and for the batch's first; answered when its batch has returned, abandoned when its
	// caller left while it was out (its batch's sender then settles and recycles it).
	taken, sender, answered, abandoned bool
}

// ErrWithdrawn is matched, beside its context's error, by the error Do returns for an operation
// withdrawn unsent: its caller's context ended while it waited for a batch. It never takes effect.
var ErrWithdrawn = errors.New("batch: withdrawn unsent")

// New returns a Batcher with at most limit operations or batches in flight (at least 1).
func New[T any](limit int, f Funcs[T]) *Batcher[T] {
	b := &Batcher[T]{f: f, max: max(limit, 1), yield: runtime.Gosched}
	b.waiters.New = func() any { return &waiter[T]{wake: make(chan []*waiter[T], 1)} }
	return b
}

// Do runs op, alone or in a batch, and returns nil once op has its outcome, or ctx's error when ctx
// ended first. In that case op may have been withdrawn unsent (the error matches ErrWithdrawn too),
// or be out in a batch that still writes its outcome (Funcs.Abandon was called with it): the caller
// must not reuse it.
func (b *Batcher[T]) Do(ctx context.Context, op T) error {
	b.mu.Lock()
	if b.inFlight < b.max {
		b.inFlight++
		if b.contended {
			// Callers waited for the last round trip: let those ready to run join this one.
			b.mu.Unlock()
			b.yield()
			b.mu.Lock()
			if batch := b.joined(ctx, op); batch != nil {
				b.mu.Unlock()
				b.lead(batch)
				b.recycle(batch[0])
				return nil
			}
		}
		b.mu.Unlock()
		defer b.done() // even if One panics: the round trip ends and the queue moves on
		b.f.One(ctx, op)
		return nil
	}
	w := b.waiters.Get().(*waiter[T])
	w.ctx, w.op, w.taken, w.sender, w.answered, w.abandoned = ctx, op, false, false, false, false
	b.queue = append(b.queue, w)
	b.mu.Unlock()
	var batch []*waiter[T]
	select {
	case batch = <-w.wake:
	case <-ctx.Done():
		b.mu.Lock()
		switch {
		case !w.taken: // still waiting: withdraw it, unsent
			b.queue = slices.DeleteFunc(b.queue, func(o *waiter[T]) bool { return o == w })
			b.mu.Unlock()
			b.recycle(w)
			return fmt.Errorf("%w (%w)", ctx.Err(), ErrWithdrawn)
		case !w.sender && w.answered: // answered after all: its outcome is the caller's
			b.mu.Unlock()
			<-w.wake
			b.recycle(w)
			return nil
		case !w.sender: // out in another caller's batch, which still writes to op
			w.abandoned = true
			if b.f.Abandon != nil {
				b.f.Abandon(op)
			}
			b.mu.Unlock()
			return ctx.Err()
		}
		b.mu.Unlock()
		batch = <-w.wake // handed over right after it was taken: others depend on this goroutine
	}
	if batch != nil {
		b.lead(batch)
	}
	b.recycle(w)
	return nil
}

// joined returns the batch of op and the operations queued while its caller yielded, op first and
// its caller the sender, or nil when none queued (the batcher is no longer contended). b.mu is held.
func (b *Batcher[T]) joined(ctx context.Context, op T) []*waiter[T] {
	if len(b.queue) == 0 {
		b.contended = false
		return nil
	}
	w := b.waiters.Get().(*waiter[T])
	w.ctx, w.op, w.answered, w.abandoned = ctx, op, false, false
	b.queue = slices.Insert(b.queue, 0, w)
	return b.take()
}

// take empties the queue into a batch, its first waiter the sender; b.mu is held.
func (b *Batcher[T]) take() []*waiter[T] {
	batch := b.queue
	b.queue = make([]*waiter[T], 0, len(batch))
	for _, w := range batch {
		w.taken = true
	}
	batch[0].sender = true
	return batch
}

// lead sends batch from the goroutine of its first waiter, then ends the round trip (even if a
// Funcs panics: the queue moves on).
func (b *Batcher[T]) lead(batch []*waiter[T]) {
	defer b.done()
	b.send(batch)
}

// Max returns the most operations or batches in flight at once.
func (b *Batcher[T]) Max() int { return b.max }

// Waiting returns the number of operations waiting for a batch.
func (b *Batcher[T]) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// InFlight returns the number of operations or batches out.
func (b *Batcher[T]) InFlight() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight
}

// recycle returns w to the pool once nobody else refers to it: its caller has its outcome, or
// withdrew it before it was taken, or left while it was out and its batch has returned.
func (b *Batcher[T]) recycle(w *waiter[T]) {
	var zero T
	w.ctx, w.op = nil, zero
	b.waiters.Put(w)
}

// done ends a round trip: the operations queued meanwhile, if any, become the next batch, sent by
// the first of them; otherwise one fewer is in flight.
func (b *Batcher[T]) done() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inFlight--
		b.mu.Unlock()
		return
	}
	b.contended = true
	batch := b.take()
	b.mu.Unlock()
	batch[0].wake <- batch
}

// send runs batch, the first waiter's goroutine calling, and wakes the others.
func (b *Batcher[T]) send(batch []*waiter[T]) {
	finished := false
	defer func() {
		// Even if Many panics (or exits the goroutine) here, the others must not wait forever, nor
		// take an operation that was never answered for a success.
		if !finished {
			r := recover()
			err := fmt.Errorf("the goroutine sending a batch stopped (%v) before its replies came", r)
			for _, w := range batch[1:] {
				b.f.Fail(w.op, err)
			}
			b.wake(batch[1:])
			if r != nil {
				panic(r)
			}
			return
		}
		b.wake(batch[1:])
	}()
	if len(batch) == 1 {
		b.f.One(batch[0].ctx, batch[0].op)
		finished = true
		return
	}
	ctx, cancel := batchContext(batch, b.f.Bound)
	defer cancel()
	ops := make([]T, len(batch))
	for i, w := range batch {
		ops[i] = w.op
	}
	b.f.Many(ctx, ops)
	finished = true
}

// wake tells the callers of batch that their operations were answered, and settles those whose
// callers left (Funcs.Settle).
func (b *Batcher[T]) wake(batch []*waiter[T]) {
	if len(batch) == 0 {
		return
	}
	b.mu.Lock()
	for _, w := range batch {
		w.answered = true
	}
	b.mu.Unlock()
	for _, w := range batch {
		if !w.abandoned {
			w.wake <- nil
			continue
		}
		if b.f.Settle != nil {
			b.f.Settle(w.op)
		}
		b.recycle(w) // its caller is gone
	}
}

// batchContext is the context of a batch: the first waiter's values, no cancellation, and the latest
// deadline of the batch, bound from now standing in for a waiter's without one (none if bound is not
// positive).
func batchContext[T any](batch []*waiter[T], bound time.Duration) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, w := range batch {
		d, ok := w.ctx.Deadline()
		if !ok && bound <= 0 {
			return context.WithoutCancel(batch[0].ctx), func() {}
		}
		if !ok {
			d = time.Now().Add(bound)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}
