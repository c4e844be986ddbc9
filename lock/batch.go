package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/batch"
)

// DefaultMaxInFlight is the default [Options.MaxInFlight].
const DefaultMaxInFlight = 1

// batcher sends a Locker's native commands with automatic pipelining (package internal/batch): a
// command goes out at once, on its own, while fewer than max round trips are in flight; otherwise it
// waits, and when a round trip returns, every command that waited meanwhile leaves together in one
// pipeline, sent by the goroutine of the first of them. Under concurrency this turns many round trips
// into one (fewer system calls in this process, fewer reads and writes in Redis); a lone caller never
// waits and pays nothing beyond a mutex.
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
//
// On a Redis Cluster each primary has its own queue and its own max round trips: a pipeline carries
// the commands for one node, and a node that is slow or down (go-redis retries its commands for a
// second or more) holds up only the commands for its own keys.
//
// A command whose caller left while it was out may not even be written yet (its sender waits for a
// connection, say), so it can land after anything its caller does next: the batcher keeps the keys
// of such commands until their pipelines return, and a compare-and-delete on one of those keys waits
// for them (see settled).
type batcher struct {
	// Batcher sends every command, or on a Redis Cluster those whose node is not known.
	*batch.Batcher[redis.Cmder]

	// On a Redis Cluster, route names the primary a key's commands go to, and each primary has a
	// Batcher of its own (made by newShard): a pipeline carries commands for one node only, so a
	// node that is slow or down holds up its own keys' commands, not every key's.
	route    func(ctx context.Context, key string) string
	newShard func() *batch.Batcher[redis.Cmder]
	smu      sync.Mutex
	shards   map[string]*batch.Batcher[redis.Cmder] // by the primary's address

	mu  sync.Mutex
	out map[string]*outKey // Redis key → its commands whose callers left while they were out
}

// outKey counts a key's commands out in pipelines after their callers left; settled is closed when
// the last has returned.
type outKey struct {
	n       int
	settled chan struct{}
}

// newBatcher returns a batcher on client when client is a go-redis client whose pipelines are its
// own commands (a *redis.Client, *redis.ClusterClient or *redis.Ring), and nil otherwise: a wrapper
// that overrides Process (to inject faults, say) keeps seeing every command.
func newBatcher(client Client, max int) *batcher {
	if max < 1 {
		return nil
	}
	var pipeline func() redis.Pipeliner
	var route func(ctx context.Context, key string) string
	switch c := client.(type) {
	case *redis.Client:
		pipeline = c.Pipeline
	case *redis.ClusterClient:
		pipeline = c.Pipeline
		route = func(ctx context.Context, key string) string {
			node, err := c.MasterForKey(ctx, key) // the client's slot map: no round trip
			if err != nil {
				return ""
			}
			return node.Options().Addr
		}
	case *redis.Ring:
		pipeline = c.Pipeline
	default:
		return nil
	}
	b := &batcher{out: make(map[string]*outKey), route: route}
	b.newShard = func() *batch.Batcher[redis.Cmder] {
		return batch.New(max, batch.Funcs[redis.Cmder]{
			One: func(ctx context.Context, cmd redis.Cmder) { _ = client.Process(ctx, cmd) },
			Many: func(ctx context.Context, cmds []redis.Cmder) {
				pipe := pipeline()
				for _, cmd := range cmds {
					_ = pipe.Process(ctx, cmd)
				}
				// Each command carries its own reply or error; an error of the pipeline itself,
				// which no command carries (a hook that refused it, say), is also set on every
				// command without one. An error some command carries is that command's own: on a
				// Redis Cluster, that of the commands on a node that is down (a pipeline meant for
				// one node may still span several after a failover or a resharding), while the
				// other nodes' replies stand.
				if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isServerError(err) && !carried(cmds, err) {
					for _, cmd := range cmds {
						failUnanswered(cmd, err)
					}
				}
			},
			Fail:    func(cmd redis.Cmder, err error) { failUnanswered(cmd, fmt.Errorf("lock: %w", err)) },
			Abandon: b.abandon,
			Settle:  b.settle,
		})
	}
	b.Batcher = b.newShard()
	if route != nil {
		b.shards = make(map[string]*batch.Batcher[redis.Cmder])
	}
	return b
}

// of returns the Batcher of the commands on Redis key k: on a Redis Cluster that of k's primary as
// the client's slot map has it, otherwise (or when the client knows no primary for k) the batcher's own.
func (b *batcher) of(ctx context.Context, k string) *batch.Batcher[redis.Cmder] {
	if b.route == nil {
		return b.Batcher
	}
	addr := b.route(ctx, k)
	if addr == "" {
		return b.Batcher
	}
	b.smu.Lock()
	defer b.smu.Unlock()
	s := b.shards[addr]
	if s == nil {
		s = b.newShard()
		b.shards[addr] = s
	}
	return s
}

// all returns every Batcher of b.
func (b *batcher) all() []*batch.Batcher[redis.Cmder] {
	b.smu.Lock()
	defer b.smu.Unlock()
	all := []*batch.Batcher[redis.Cmder]{b.Batcher}
	for _, s := range b.shards {
		all = append(all, s)
	}
	return all
}

// Waiting returns the number of commands waiting for a pipeline, over every node.
func (b *batcher) Waiting() int {
	n := 0
	for _, s := range b.all() {
		n += s.Waiting()
	}
	return n
}

// InFlight returns the number of commands or pipelines out, over every node.
func (b *batcher) InFlight() int {
	n := 0
	for _, s := range b.all() {
		n += s.InFlight()
	}
	return n
}

// abandon notes that cmd is out in a pipeline after its caller left.
func (b *batcher) abandon(cmd redis.Cmder) {
	k := cmdKey(cmd)
	b.mu.Lock()
	defer b.mu.Unlock()
	o := b.out[k]
	if o == nil {
		o = &outKey{settled: make(chan struct{})}
		b.out[k] = o
	}
	o.n++
}

// settle notes that the pipeline of an abandoned cmd has returned.
func (b *batcher) settle(cmd redis.Cmder) {
	k := cmdKey(cmd)
	b.mu.Lock()
	defer b.mu.Unlock()
	if o := b.out[k]; o != nil {
		if o.n--; o.n == 0 {
			close(o.settled)
			delete(b.out, k)
		}
	}
}

// settled waits until no command on Redis key k is out in a pipeline after its caller left, or ctx
// ends. A compare-and-delete waits for it: a lock an abandoned Acquire takes after the release ran
// would stay until its time to live ran out. A nil batcher has nothing out.
func (b *batcher) settled(ctx context.Context, k string) error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	o := b.out[k]
	b.mu.Unlock()
	if o == nil {
		return nil
	}
	select {
	case <-o.settled:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cmdKey is the Redis key of one of the Locker's native commands (SET key ...).
func cmdKey(cmd redis.Cmder) string {
	k, _ := cmd.Args()[1].(string)
	return k
}

// do sends cmd and returns its error, as Process does.
func (b *batcher) do(ctx context.Context, cmd redis.Cmder) error {
	if err := b.of(ctx, cmdKey(cmd)).Do(ctx, cmd); err != nil {
		return err
	}
	return cmd.Err()
}

// carried reports whether one of cmds carries err: go-redis set it on the commands it concerns.
func carried(cmds []redis.Cmder, err error) bool {
	for _, cmd := range cmds {
		if errors.Is(cmd.Err(), err) {
			return true
		}
	}
	return false
}

// failUnanswered sets err on cmd when it carries no error, as go-redis does for a network error: a
// reply read before it is given up too (a caller then treats a command that took effect as failed,
// as it would after a lost reply).
func failUnanswered(cmd redis.Cmder, err error) {
	if cmd.Err() == nil {
		cmd.SetErr(err)
	}
}
