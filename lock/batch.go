package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultMaxInFlight is the default [Options.MaxInFlight].
const DefaultMaxInFlight = 1

// batcher sends a Locker's native commands with automatic pipelining, the way group commit batches
// database commits: a command goes out at once, on its own, while fewer than max round trips are in
// flight; otherwise it waits, and when a round trip returns, every command that waited meanwhile
// leaves together in one pipeline, sent by the goroutine of the first of them. Under concurrency this
// turns many round trips into one (fewer system calls in this process, fewer reads and writes in
// Redis); a lone caller never waits and pays nothing beyond a mutex.
//
// Every caller stays bounded by its own context, as with a command of its own: when it ends while the
// command waits, the command is withdrawn and never sent; when it ends while the command is out in
// another caller's pipeline, the caller returns at once (the command may still take effect, as a
// command whose reply is abandoned may). A pipeline runs without its callers' cancellation and until
// the latest of their deadlines, so one caller's end never fails another's command; the caller that
// sends it does so even if its own context ended after the pipeline formed, and waits for it: on an
// unresponsive Redis that caller may wait past its own deadline, up to the latest deadline among the
// pipeline's callers (or the client's read timeout when one of them has none). A pipeline carries the
// context values of the caller that sends it (go-redis hooks, tracing among them, see it as that
// caller's).
type batcher struct {
	pipeline func() redis.Pipeliner
	process  func(ctx context.Context, cmd redis.Cmder) error
	max      int

	mu       sync.Mutex
	inFlight int
	queue    []*batchOp
	ops      sync.Pool // of *batchOp, reused once their caller has its reply or withdrew them
}

// batchOp is a command waiting for a round trip.
type batchOp struct {
	ctx context.Context
	cmd redis.Cmder
	// wake receives nil when cmd has been sent and answered, or the batch to send (cmd first) when
	// this op's goroutine is to send it.
	wake chan []*batchOp
	// taken and sender are set, under the batcher's mutex, when the op leaves the queue in a batch,
	// and for the batch's first op.
	taken, sender bool
}

// newBatcher returns a batcher on client when client is a go-redis client whose pipelines are its
// own commands (a *redis.Client, *redis.ClusterClient or *redis.Ring), and nil otherwise: a wrapper
// that overrides Process (to inject faults, say) keeps seeing every command.
func newBatcher(client Client, max int) *batcher {
	if max < 1 {
		return nil
	}
	var pipeline func() redis.Pipeliner
	switch c := client.(type) {
	case *redis.Client:
		pipeline = c.Pipeline
	case *redis.ClusterClient:
		pipeline = c.Pipeline
	case *redis.Ring:
		pipeline = c.Pipeline
	default:
		return nil
	}
	b := &batcher{pipeline: pipeline, process: client.Process, max: max}
	b.ops.New = func() any { return &batchOp{wake: make(chan []*batchOp, 1)} }
	return b
}

// do sends cmd and returns its error, as Process does.
func (b *batcher) do(ctx context.Context, cmd redis.Cmder) error {
	b.mu.Lock()
	if b.inFlight < b.max {
		b.inFlight++
		b.mu.Unlock()
		defer b.done() // even if a hook panics: the round trip ends and the queue moves on
		return b.process(ctx, cmd)
	}
	op := b.ops.Get().(*batchOp)
	op.ctx, op.cmd, op.taken, op.sender = ctx, cmd, false, false
	b.queue = append(b.queue, op)
	b.mu.Unlock()
	var batch []*batchOp
	select {
	case batch = <-op.wake:
	case <-ctx.Done():
		b.mu.Lock()
		switch {
		case !op.taken: // still waiting: withdraw it, unsent
			b.queue = slices.DeleteFunc(b.queue, func(o *batchOp) bool { return o == op })
			b.mu.Unlock()
			b.recycle(op)
			return ctx.Err()
		case !op.sender:
			b.mu.Unlock()
			select {
			case <-op.wake: // answered after all: its reply is the caller's
				b.recycle(op)
				return cmd.Err()
			default: // out in another caller's pipeline, which still writes to op and cmd
				return ctx.Err()
			}
		}
		b.mu.Unlock()
		batch = <-op.wake // handed over right after it was taken: others depend on this goroutine
	}
	if batch != nil {
		func() {
			defer b.done()
			b.send(batch)
		}()
	}
	b.recycle(op)
	return cmd.Err()
}

// recycle returns op to the pool once nobody else refers to it: its caller has its reply, or withdrew
// it before it was taken.
func (b *batcher) recycle(op *batchOp) {
	op.ctx, op.cmd = nil, nil
	b.ops.Put(op)
}

// done ends a round trip: the commands queued meanwhile, if any, become the next one, sent by the
// first of them; otherwise one fewer round trip is in flight.
func (b *batcher) done() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inFlight--
		b.mu.Unlock()
		return
	}
	batch := b.queue
	b.queue = make([]*batchOp, 0, len(batch))
	for _, op := range batch {
		op.taken = true
	}
	batch[0].sender = true
	b.mu.Unlock()
	batch[0].wake <- batch
}

// send sends batch, the first op's goroutine calling, and wakes the others.
func (b *batcher) send(batch []*batchOp) {
	finished := false
	defer func() {
		// Even if a hook panics (or exits the goroutine) here, the others must not wait forever, nor
		// take a command that was never answered for a success.
		if !finished {
			r := recover()
			failUnanswered(batch[1:], fmt.Errorf("lock: the goroutine sending a pipeline stopped (%v) before its replies came", r))
			b.wake(batch[1:])
			if r != nil {
				panic(r)
			}
			return
		}
		b.wake(batch[1:])
	}()
	if len(batch) == 1 {
		_ = b.process(batch[0].ctx, batch[0].cmd)
		finished = true
		return
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	pipe := b.pipeline()
	for _, op := range batch {
		_ = pipe.Process(ctx, op.cmd)
	}
	// Each command carries its own reply or error; an error of the pipeline itself (a hook that
	// refused it, say) is also set on every command without one.
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isServerError(err) {
		failUnanswered(batch, err)
	}
	finished = true
}

// failUnanswered sets err on the commands of ops that carry no error, as go-redis does for a network
// error: a reply read before it is given up too (a caller then treats a command that took effect as
// failed, as it would after a lost reply).
func failUnanswered(ops []*batchOp, err error) {
	for _, op := range ops {
		if op.cmd.Err() == nil {
			op.cmd.SetErr(err)
		}
	}
}

// wake tells the callers of ops that their commands were answered.
func (b *batcher) wake(ops []*batchOp) {
	for _, op := range ops {
		op.wake <- nil
	}
}

// batchContext is the context of a pipeline: the first op's values, no cancellation, and the latest
// deadline of the batch (none if any op has none).
func batchContext(batch []*batchOp) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, op := range batch {
		d, ok := op.ctx.Deadline()
		if !ok {
			return context.WithoutCancel(batch[0].ctx), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}
