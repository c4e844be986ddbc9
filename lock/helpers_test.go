package lock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/redis/go-redis/v9"
)

// Compile-time checks: the Locker is an idemkit.Locker, and every kind of go-redis client is a Client.
var (
	_ idemkit.Locker = (*lock.Locker)(nil)
	_ lock.Client    = (*redis.Client)(nil)
	_ lock.Client    = (*redis.ClusterClient)(nil)
	_ lock.Client    = (*redis.Ring)(nil)
	_ lock.Client    = redis.UniversalClient(nil)
)

// bundle is what setup returns besides the Locker.
type bundle struct {
	rdb    *redis.Client
	prefix string
}

// setup returns a Locker on the shared test Redis with a prefix of its own, whose keys are deleted
// when t ends.
func setup(t testing.TB) (*lock.Locker, *bundle) {
	t.Helper()
	return setupMode(t, false)
}

// setupMode is setup with a Locker on native commands or, with scripts, on Lua scripts only.
func setupMode(t testing.TB, scripts bool) (*lock.Locker, *bundle) {
	t.Helper()
	rdb := testsvc.Redis(t)
	b := &bundle{rdb: rdb, prefix: testsvc.Name("idemkit_test_") + ":"}
	testsvc.CleanRedis(t, rdb, b.prefix)
	return lock.New(rdb, &lock.Options{Prefix: b.prefix, Scripts: scripts}), b
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errInjected is the failure a flakyScripter returns.
var errInjected = errors.New("flaky scripter: injected failure")

// flakyScripter wraps a client and fails every n-th command (a native one, EVALSHA or EVAL) before
// sending it.
type flakyScripter struct {
	*redis.Client
	every  int64
	calls  atomic.Int64
	failed atomic.Int64
}

func (f *flakyScripter) inject(ctx context.Context) *redis.Cmd {
	if f.calls.Add(1)%f.every != 0 {
		return nil
	}
	f.failed.Add(1)
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(errInjected)
	return cmd
}

func (f *flakyScripter) Process(ctx context.Context, cmd redis.Cmder) error {
	if c := f.inject(ctx); c != nil {
		cmd.SetErr(errInjected)
		return errInjected
	}
	return f.Client.Process(ctx, cmd)
}

func (f *flakyScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	if cmd := f.inject(ctx); cmd != nil {
		return cmd
	}
	return f.Client.Eval(ctx, script, keys, args...)
}

func (f *flakyScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	if cmd := f.inject(ctx); cmd != nil {
		return cmd
	}
	return f.Client.EvalSha(ctx, sha1, keys, args...)
}

// cmdCounter is a go-redis hook recording the name of every command sent, pipelined or not.
type cmdCounter struct {
	mu   sync.Mutex
	cmds []string
}

func (c *cmdCounter) add(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range cmds {
		c.cmds = append(c.cmds, cmd.Name())
	}
}

// take returns the commands recorded since the last take and forgets them.
func (c *cmdCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmds := c.cmds
	c.cmds = nil
	return cmds
}

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.add(cmds...)
		return next(ctx, cmds)
	}
}

// events is an idemkit.Observer keeping every finished call's event.
type events struct {
	mu  sync.Mutex
	evs []idemkit.Event
}

func (o *events) Start(ctx context.Context, _ idemkit.Mode, _ string) (context.Context, func(*idemkit.Event)) {
	return ctx, func(ev *idemkit.Event) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.evs = append(o.evs, *ev)
	}
}

// take returns the events recorded since the last take and forgets them.
func (o *events) take() []idemkit.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	evs := o.evs
	o.evs = nil
	return evs
}

// newGuard returns a Guard over store with opts, failing t on an error.
func newGuard(t testing.TB, store idemkit.Store, opts *idemkit.Options) *idemkit.Guard {
	t.Helper()
	g, err := idemkit.New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// testCtx returns a context bounded well under the package's time budget.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
