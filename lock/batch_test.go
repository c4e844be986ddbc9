package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// gate is a go-redis hook that holds the command on gateKey until opened, and records the pipelines
// sent.
type gate struct {
	key     string
	entered chan struct{}
	open    chan struct{}
	held    atomic.Bool // only the first command on key is held

	mu        sync.Mutex
	pipelines [][]string // the keys of each pipeline's commands
}

func newGate(key string) *gate {
	return &gate{key: key, entered: make(chan struct{}), open: make(chan struct{})}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if len(cmd.Args()) > 1 && cmd.Args()[1] == g.key && g.held.CompareAndSwap(false, true) {
			close(g.entered)
			<-g.open
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "client" || cmds[0].Name() == "hello" {
			return next(ctx, cmds) // a new connection's handshake
		}
		keys := make([]string, len(cmds))
		for i, c := range cmds {
			if len(c.Args()) > 1 {
				keys[i] = fmt.Sprint(c.Args()[1])
			}
		}
		g.mu.Lock()
		g.pipelines = append(g.pipelines, keys)
		g.mu.Unlock()
		return next(ctx, cmds)
	}
}

// holdRoundTrip starts the command on g's key through b and returns once it is in flight, held by
// the gate: b then has its one round trip out, and every command after it waits.
func holdRoundTrip(t *testing.T, b *batcher, g *gate) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		errc <- b.do(context.Background(), redis.NewStatusCmd(context.Background(), "set", g.key, "held"))
	}()
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the held command never reached Redis")
	}
	return errc
}

// waitQueued waits until n commands wait in b.
func waitQueued(t *testing.T, b *batcher, n int) {
	t.Helper()
	for i := 0; ; i++ {
		q := b.Waiting()
		if q == n {
			return
		}
		if i > 30000 {
			t.Fatalf("%d commands queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func batchRedis(t *testing.T) (*redis.Client, string, *gate) {
	rdb := testsvc.Redis(t)
	prefix := testsvc.Name("idemkit_batch_") + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	g := newGate(prefix + "gate")
	rdb.AddHook(g)
	return rdb, prefix, g
}

// TestBatcherPipelinesWhatWaited: while one round trip is out (MaxInFlight 1), the commands issued
// meanwhile wait and then leave as one pipeline; each gets its own reply or error.
func TestBatcherPipelinesWhatWaited(t *testing.T) {
	rdb, prefix, g := batchRedis(t)
	ctx := context.Background()
	must(t, rdb.Set(ctx, prefix+"text", "not a number", time.Minute).Err())
	b := newBatcher(rdb, 1)
	held := holdRoundTrip(t, b, g)

	const n = 20
	cmds := make([]redis.Cmder, n)
	var wg sync.WaitGroup
	for i := range n {
		if i == n/2 {
			cmds[i] = redis.NewIntCmd(ctx, "incr", prefix+"text") // fails, alone
		} else {
			cmds[i] = redis.NewStringCmd(ctx, "set", prefix+strconv.Itoa(i), "v"+strconv.Itoa(i), "nx", "px", 60000, "get")
		}
		wg.Go(func() { _ = b.do(ctx, cmds[i]) })
		waitQueued(t, b, i+1) // in order: the first queued sends the pipeline
	}
	close(g.open)
	must(t, <-held)
	wg.Wait()

	if len(g.pipelines) != 1 || len(g.pipelines[0]) != n {
		t.Fatalf("pipelines sent: %v; want one of the %d waiting commands", g.pipelines, n)
	}
	for i, cmd := range cmds {
		if i == n/2 {
			if cmd.Err() == nil || errors.Is(cmd.Err(), redis.Nil) {
				t.Errorf("INCR of a text: %v; want Redis's error", cmd.Err())
			}
			continue
		}
		if !errors.Is(cmd.Err(), redis.Nil) { // SET NX GET on a new key: set, and nil (no old value)
			t.Errorf("command %d: %v; want redis.Nil", i, cmd.Err())
		}
		if v, err := rdb.Get(ctx, prefix+strconv.Itoa(i)).Result(); err != nil || v != "v"+strconv.Itoa(i) {
			t.Errorf("key %d holds %q, %v", i, v, err)
		}
	}
	if b.InFlight() != 0 || b.Waiting() != 0 {
		t.Fatalf("after the round trips: %d in flight, %d queued", b.InFlight(), b.Waiting())
	}
}

// TestBatcherCallerCancellationFailsNoOther: a caller whose context ends while its command waits
// withdraws it (never sent) and returns at once, even when it was first in line; the commands that
// waited with it leave as one pipeline, sent by the next caller, and succeed.
func TestBatcherCallerCancellationFailsNoOther(t *testing.T) {
	rdb, prefix, g := batchRedis(t)
	b := newBatcher(rdb, 1)
	held := holdRoundTrip(t, b, g)

	first, cancel := context.WithCancel(context.Background())
	later, cancelLater := context.WithTimeout(context.Background(), time.Minute)
	defer cancelLater()
	ctxs := []context.Context{first, context.Background(), later}
	cmds := make([]*redis.StatusCmd, len(ctxs))
	errs := make([]chan error, len(ctxs))
	for i, ctx := range ctxs {
		cmds[i] = redis.NewStatusCmd(ctx, "set", prefix+strconv.Itoa(i), "v", "px", 60000)
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- b.do(ctx, cmds[i]) }()
		waitQueued(t, b, i+1)
	}
	cancel()
	if err := <-errs[0]; !errors.Is(err, context.Canceled) { // returns while the round trip is still held
		t.Fatalf("cancelled caller: %v; want context.Canceled", err)
	}
	waitQueued(t, b, len(ctxs)-1)
	close(g.open)
	must(t, <-held)
	for i := 1; i < len(ctxs); i++ {
		if err := <-errs[i]; err != nil || cmds[i].Val() != "OK" {
			t.Errorf("command %d: %q, %v; want OK", i, cmds[i].Val(), err)
		}
	}
	if n, err := rdb.Exists(context.Background(), prefix+"0").Result(); err != nil || n != 0 {
		t.Errorf("the withdrawn command was sent: exists %d, %v", n, err)
	}
	if len(g.pipelines) != 1 || len(g.pipelines[0]) != len(ctxs)-1 {
		t.Fatalf("pipelines sent: %v", g.pipelines)
	}
}

// TestBatcherCallerDeadlineInAnotherPipeline: a caller whose command is out in a pipeline another
// caller sends returns when its own context ends, without waiting for that pipeline (whose sender's
// context has no end); the sender's pipeline then completes, and the batcher goes on.
func TestBatcherCallerDeadlineInAnotherPipeline(t *testing.T) {
	rdb, prefix, g := batchRedis(t)
	slow := newGate(prefix + "slow")
	rdb.AddHook(pipelineGate{slow})
	b := newBatcher(rdb, 1)
	held := holdRoundTrip(t, b, g)
	ctx := context.Background()

	senderErr := make(chan error, 1)
	go func() { senderErr <- b.do(ctx, redis.NewStatusCmd(ctx, "set", slow.key, "v")) }()
	waitQueued(t, b, 1)
	short, cancel := context.WithCancel(ctx)
	defer cancel()
	followerErr := make(chan error, 1)
	go func() { followerErr <- b.do(short, redis.NewStatusCmd(short, "set", prefix+"follower", "v")) }()
	waitQueued(t, b, 2)
	close(g.open) // the two leave as one pipeline, held by the pipeline gate
	must(t, <-held)
	select {
	case <-slow.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the pipeline never reached Redis")
	}
	// The follower's command is out in the held pipeline now: it returns while the pipeline is held.
	cancel()
	if err := <-followerErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("follower: %v; want its cancellation", err)
	}
	close(slow.open)
	must(t, <-senderErr)
	after := redis.NewStatusCmd(ctx, "set", prefix+"after", "v")
	if err := b.do(ctx, after); err != nil || after.Val() != "OK" {
		t.Fatalf("after: %q, %v", after.Val(), err)
	}
}

// pipelineGate holds a pipeline carrying the gate's key until the gate opens.
type pipelineGate struct{ *gate }

func (p pipelineGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p pipelineGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if len(c.Args()) > 1 && c.Args()[1] == p.key && p.held.CompareAndSwap(false, true) {
				close(p.entered)
				<-p.open
			}
		}
		return next(ctx, cmds)
	}
}

// wrapped overrides Process, as a fault-injecting test client does.
type wrapped struct{ *redis.Client }

func (w wrapped) Process(ctx context.Context, cmd redis.Cmder) error {
	return w.Client.Process(ctx, cmd)
}

// TestBatcherOnlyOnGoRedisClients: batching is on by default for go-redis's own clients, off when
// MaxInFlight is negative, and never for a wrapper, whose Process must see every command.
func TestBatcherOnlyOnGoRedisClients(t *testing.T) {
	rdb := testsvc.Redis(t)
	if New(rdb, nil).batch == nil {
		t.Error("no batching on a *redis.Client by default")
	}
	if New(rdb, &Options{MaxInFlight: -1}).batch != nil {
		t.Error("batching with MaxInFlight -1")
	}
	if New(wrapped{rdb}, nil).batch != nil {
		t.Error("batching on a wrapper: its Process would miss the batched commands")
	}
	if l := New(rdb, &Options{MaxInFlight: 3}); l.batch == nil || l.batch.Max() != 3 {
		t.Error("MaxInFlight 3 not applied")
	}
}

// TestBatchedLockerContention: many goroutines contend for the same keys through one Locker whose
// commands are batched; each key is acquired by exactly one token, and after its release every
// caller reads the cached result.
func TestBatchedLockerContention(t *testing.T) {
	rdb := testsvc.Redis(t)
	prefix := testsvc.Name("idemkit_batch_") + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	l := New(rdb, &Options{Prefix: prefix, MaxInFlight: 1})
	var trips, cmds atomic.Int64
	rdb.AddHook(tripCounter{&trips, &cmds})
	ctx := context.Background()

	const keys, workers = 50, 16
	winners := make([]atomic.Int32, keys)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for k := range keys {
				key, tok := "k"+strconv.Itoa(k), "w"+strconv.Itoa(w)
				cached, err := l.Acquire(ctx, key, tok, time.Minute)
				var inFlight *idemkit.InFlightError
				switch {
				case errors.As(err, &inFlight), cached != nil:
				case err != nil:
					t.Errorf("acquire %s: %v", key, err)
				default:
					winners[k].Add(1)
					if err := l.Release(ctx, key, tok, []byte("r"+strconv.Itoa(k)), time.Minute); err != nil {
						t.Errorf("release %s: %v", key, err)
					}
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		if n := winners[k].Load(); n != 1 {
			t.Errorf("key %d acquired %d times", k, n)
		}
		cached, err := l.Acquire(ctx, "k"+strconv.Itoa(k), "late", time.Minute)
		if err != nil || string(cached) != "r"+strconv.Itoa(k) {
			t.Errorf("key %d after release: %q, %v", k, cached, err)
		}
	}
	t.Logf("%d commands in %d round trips", cmds.Load(), trips.Load())
}

// tripCounter counts commands and round trips.
type tripCounter struct{ trips, cmds *atomic.Int64 }

func (c tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(1)
		return next(ctx, cmd)
	}
}
func (c tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// panicky panics in a pipeline that carries its key, as a faulty go-redis hook might.
type panicky struct{ key string }

func (p panicky) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (p panicky) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p panicky) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if len(c.Args()) > 1 && c.Args()[1] == p.key {
				panic("hook panics")
			}
		}
		return next(ctx, cmds)
	}
}

// TestBatcherSurvivesAPanickingSender: when the goroutine sending a pipeline panics (a hook), the
// panic reaches that caller, every other caller in the pipeline gets an error instead of waiting
// forever, and the batcher goes on working.
func TestBatcherSurvivesAPanickingSender(t *testing.T) {
	rdb, prefix, g := batchRedis(t)
	rdb.AddHook(panicky{prefix + "boom"})
	b := newBatcher(rdb, 1)
	held := holdRoundTrip(t, b, g)
	ctx := context.Background()

	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_ = b.do(ctx, redis.NewStatusCmd(ctx, "set", prefix+"boom", "v"))
	}()
	waitQueued(t, b, 1)
	other := redis.NewStatusCmd(ctx, "set", prefix+"other", "v")
	errc := make(chan error, 1)
	go func() { errc <- b.do(ctx, other) }()
	waitQueued(t, b, 2)
	close(g.open)
	must(t, <-held)
	if r := <-panicked; r == nil {
		t.Fatal("the sender's caller did not see the panic")
	}
	if err := <-errc; err == nil {
		t.Fatal("the other command of the panicked pipeline reported success")
	}
	after := redis.NewStatusCmd(ctx, "set", prefix+"after", "v")
	if err := b.do(ctx, after); err != nil || after.Val() != "OK" {
		t.Fatalf("after the panic: %q, %v", after.Val(), err)
	}
	if b.InFlight() != 0 || b.Waiting() != 0 {
		t.Fatalf("after the panic: %d in flight, %d queued", b.InFlight(), b.Waiting())
	}
}

// refusing is a pipeline hook that refuses every pipeline without sending it, as a circuit breaker
// might.
type refusing struct{}

var errRefused = errors.New("circuit open")

func (refusing) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (refusing) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (refusing) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(context.Context, []redis.Cmder) error { return errRefused }
}

// TestBatcherPipelineErrorReachesEveryCommand: a pipeline refused as a whole (its hook returns an
// error without sending it) fails every command in it, never reporting an unsent command as a
// success with an empty reply; the Locker then reports Redis as unavailable, not a cached result.
func TestBatcherPipelineErrorReachesEveryCommand(t *testing.T) {
	rdb, prefix, g := batchRedis(t)
	rdb.AddHook(refusing{})
	b := newBatcher(rdb, 1)
	held := holdRoundTrip(t, b, g)
	ctx := context.Background()
	cmds := make([]*redis.StringCmd, 3)
	errs := make([]chan error, len(cmds))
	for i := range cmds {
		cmds[i] = redis.NewStringCmd(ctx, "set", prefix+strconv.Itoa(i), "v", "nx", "px", 60000, "get")
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- b.do(ctx, cmds[i]) }()
		waitQueued(t, b, i+1)
	}
	close(g.open)
	must(t, <-held)
	for i := range cmds {
		if err := <-errs[i]; !errors.Is(err, errRefused) || !errors.Is(cmds[i].Err(), errRefused) {
			t.Errorf("command %d: do %v, cmd %v; want the pipeline's error", i, err, cmds[i].Err())
		}
	}
}
