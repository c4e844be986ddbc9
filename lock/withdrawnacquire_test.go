package lock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
	"github.com/redis/go-redis/v9"
)

// scriptStall holds every script (EVALSHA, EVAL) until open is closed or its context ends: a Redis
// that stopped answering, for the releases the Guard sends in the background.
type scriptStall struct{ open chan struct{} }

func (s scriptStall) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s scriptStall) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			select {
			case <-s.open:
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}
func (s scriptStall) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestWithdrawnAcquiresReleaseNothing: calls whose context ends while their Acquire waits for a
// pipeline (Redis slow, a flood of short deadlines) had that Acquire withdrawn unsent: it never takes
// a lock. The Guard released each in the background all the same, and those releases, waiting on the
// slow Redis, took up the Guard's background releases (64 at once): the release of a call whose
// Acquire did go out, in another caller's pipeline, and landed after it left, was dropped, and that
// key answered its retries "in flight" until LockTTL ran out.
func TestWithdrawnAcquiresReleaseNothing(t *testing.T) {
	rdb, prefix, g := batchRedis(t)
	l := New(rdb, &Options{Prefix: prefix})
	slow := newGate(l.key(idemkit.LockKey("s", "k")))
	rdb.AddHook(pipelineGate{slow})
	stall := scriptStall{open: make(chan struct{})}
	rdb.AddHook(stall)
	var once sync.Once
	unstall := func() { once.Do(func() { close(stall.open) }) }
	t.Cleanup(unstall)
	guard, err := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: l, LockTTL: time.Minute, FinishTimeout: 30 * time.Second})
	must(t, err)
	t.Cleanup(func() { _ = guard.Wait(context.Background()) })
	ctx := context.Background()
	fn := func(context.Context) ([]byte, error) { return []byte("ok"), nil }

	held := holdRoundTrip(t, l.batch, g)

	// A flood of calls whose contexts end while their Acquires wait for the round trip out.
	const flood = 100
	fctx, fcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := guard.Do(fctx, idemkit.Call{Scope: "w", Key: strconv.Itoa(i)}, fn)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("a call whose context ended: %v; want its cancellation", err)
			}
		}()
	}
	waitQueued(t, l.batch, flood)
	fcancel()
	wg.Wait()
	if n := l.batch.Waiting(); n != 0 {
		t.Fatalf("%d commands still queued; want every Acquire of the flood withdrawn", n)
	}

	// A call whose Acquire goes out in another caller's pipeline and lands after the call left.
	sender := make(chan error, 1)
	go func() { _, err := guard.Do(ctx, idemkit.Call{Scope: "s", Key: "k"}, fn); sender <- err }()
	waitQueued(t, l.batch, 1)
	vctx, vcancel := context.WithCancel(ctx)
	defer vcancel()
	victim := make(chan error, 1)
	go func() { _, err := guard.Do(vctx, idemkit.Call{Scope: "v", Key: "k"}, fn); victim <- err }()
	waitQueued(t, l.batch, 2)
	close(g.open) // the two Acquires leave as one pipeline, held before it is written
	must(t, <-held)
	select {
	case <-slow.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the pipeline never reached the hook")
	}
	vcancel()
	if err := <-victim; !errors.Is(err, context.Canceled) {
		t.Fatalf("the abandoned call: %v; want its cancellation", err)
	}
	// Redis answers again.
	unstall()
	close(slow.open)
	must(t, <-sender)

	key := idemkit.LockKey("v", "k")
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := l.State(ctx, key)
		must(t, err)
		if !s.Locked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the abandoned call's lock is still held (TTL %s): its retries are turned away as in flight", s.TTL)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := guard.Do(ctx, idemkit.Call{Scope: "v", Key: "k"}, fn); err != nil {
		t.Fatalf("a retry of the abandoned call: %v", err)
	}
}
