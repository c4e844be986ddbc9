package lock

import (
	"context"
	"fmt"
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
// A waiting command is sent even if its caller's context ends meanwhile (the wait is bounded by the
// round trip in flight); a pipeline runs until the latest deadline of its callers, so one caller's
// cancellation never fails another's command. A pipeline carries the context values of the caller
// that sends it (go-redis hooks, tracing among them, see it as that caller's).
type batcher struct {
	pipeline func() redis.Pipeliner
	process  func(ctx context.Context, cmd redis.Cmder) error
	max      int

	mu       sync.Mutex
	inFlight int
	queue    []*batchOp
}

// batchOp is a command waiting for a round trip.
type batchOp struct {
	ctx context.Context
	cmd redis.Cmder
	// wake receives nil when cmd has been sent and answered, or the batch to send (cmd first) when
	// this op's goroutine is to send it.
	wake chan []*batchOp
}

var batchOpPool = sync.Pool{New: func() any { return &batchOp{wake: make(chan []*batchOp, 1)} }}

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
	return &batcher{pipeline: pipeline, process: client.Process, max: max}
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
	op := batchOpPool.Get().(*batchOp)
	op.ctx, op.cmd = ctx, cmd
	b.queue = append(b.queue, op)
	b.mu.Unlock()
	if batch := <-op.wake; batch != nil {
		func() {
			defer b.done()
			b.send(batch)
		}()
	}
	op.ctx, op.cmd = nil, nil
	batchOpPool.Put(op)
	return cmd.Err()
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
	b.mu.Unlock()
	batch[0].wake <- batch
}

// send sends batch, the first op's goroutine calling, and wakes the others.
func (b *batcher) send(batch []*batchOp) {
	defer func() {
		// Even if a hook panics in this goroutine, the others must not wait forever.
		if r := recover(); r != nil {
			for _, op := range batch[1:] {
				op.cmd.SetErr(fmt.Errorf("lock: a pipelined command's sender panicked: %v", r))
			}
			b.wake(batch[1:])
			panic(r)
		}
		b.wake(batch[1:])
	}()
	if len(batch) == 1 {
		_ = b.process(batch[0].ctx, batch[0].cmd)
		return
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	pipe := b.pipeline()
	for _, op := range batch {
		_ = pipe.Process(ctx, op.cmd)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own reply or error
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
