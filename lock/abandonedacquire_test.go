package lock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestAbandonedAcquireLeavesNoLock: a Guard call whose context ends while its Acquire is out in a
// pipeline another caller sends, not yet written (the sender still waits for a connection, or a
// hook), fails, and the Guard releases the lock that Acquire may take all the same. That release
// must not run before the Acquire lands: it found the key empty, the Acquire then locked it, and the
// key answered "in flight" to every retry until LockTTL ran out.
func TestAbandonedAcquireLeavesNoLock(t *testing.T) {
	rdb, prefix, g := batchRedis(t)
	l := New(rdb, &Options{Prefix: prefix})
	slow := newGate(l.key(idemkit.LockKey("s", "k")))
	rdb.AddHook(pipelineGate{slow})
	guard, err := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: l, LockTTL: time.Minute})
	must(t, err)
	ctx := context.Background()
	fn := func(context.Context) ([]byte, error) { return []byte("ok"), nil }

	held := holdRoundTrip(t, l.batch, g)
	sender := make(chan error, 1)
	go func() { _, err := guard.Do(ctx, idemkit.Call{Scope: "s", Key: "k"}, fn); sender <- err }()
	waitQueued(t, l.batch, 1)
	vctx, cancel := context.WithCancel(ctx)
	defer cancel()
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
	cancel()
	if err := <-victim; !errors.Is(err, context.Canceled) {
		t.Fatalf("the abandoned call: %v; want its cancellation", err)
	}
	time.Sleep(200 * time.Millisecond) // the Guard's release of the abandoned lock is under way
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
