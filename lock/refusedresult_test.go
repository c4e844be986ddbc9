package lock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/redis/go-redis/v9"
)

// TestRefusedResultReleasesTheLock: a result Redis refuses to store (larger than its
// proto-max-bulk-len) failed the release that was to cache it in place of the lock, and the lock
// stayed: every duplicate of the finished key was answered "in flight" until LockTTL ran out (the
// Guard's background retries of the release failed the same way), and the next duplicate after it
// locked the key, replayed from the Store and left it locked again. Release now deletes the lock
// when Redis refuses the result, and says the result is not cached; the duplicates are answered
// from the Store.
func TestRefusedResultReleasesTheLock(t *testing.T) {
	for _, scripts := range []bool{false, true} {
		t.Run(map[bool]string{false: "native", true: "scripts"}[scripts], func(t *testing.T) {
			p := testsvc.StartRedis(t, "--proto-max-bulk-len", "1mb")
			rdb := redis.NewClient(p.Options())
			t.Cleanup(func() { _ = rdb.Close() })
			l := lock.New(rdb, &lock.Options{Scripts: scripts})
			ctx := testCtx(t)
			big := bytes.Repeat([]byte("r"), 2<<20)

			must(t, acquireErr(l.Acquire(ctx, "s:k", "t1", time.Minute)))
			err := l.Release(ctx, "s:k", "t1", big, time.Minute)
			if err == nil || errors.Is(err, idemkit.ErrLockNotHeld) {
				t.Errorf("Release of a result Redis refused: %v, want an error saying it is not cached", err)
			}
			if n, err := rdb.Exists(ctx, l.Key("s:k")).Result(); err != nil || n != 0 {
				t.Fatalf("the key is still there (%d, %v): the lock was not released", n, err)
			}

			g := newGuard(t, memory.NewStore(), &idemkit.Options{Locker: l, LockTTL: time.Minute, FinishTimeout: 500 * time.Millisecond})
			runs := 0
			for i := range 2 {
				res, err := g.Do(ctx, idemkit.Call{Scope: "s", Key: "big"}, func(context.Context) ([]byte, error) {
					runs++
					return big, nil
				})
				if err != nil || len(res.Value) != len(big) || res.Replayed != (i > 0) {
					t.Fatalf("call %d: %d bytes, replayed %v, %v; want the result, replayed the second time", i, len(res.Value), res.Replayed, err)
				}
			}
			if runs != 1 {
				t.Fatalf("ran %d times", runs)
			}
		})
	}
}

func acquireErr(_ []byte, err error) error { return err }

// TestRefusedResultFailsNoOtherCommand: a result above Redis's proto-max-bulk-len makes Redis close
// the connection it came on. Batched (Options.MaxInFlight) with other callers' commands, it took
// them down too: Acquires of unrelated keys failed with EOF or a reset connection. A result of 1 MiB
// or more (Redis's smallest proto-max-bulk-len) is sent on its own.
func TestRefusedResultFailsNoOtherCommand(t *testing.T) {
	p := testsvc.StartRedis(t, "--proto-max-bulk-len", "1mb")
	rdb := redis.NewClient(p.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	l := lock.New(rdb, nil) // MaxInFlight 1
	ctx := testCtx(t)
	big := bytes.Repeat([]byte("r"), 2<<20)
	must(t, acquireErr(l.Acquire(ctx, "big", "t", time.Minute)))

	// Redis paused: an Acquire goes out and waits, and the commands issued meanwhile wait for it,
	// to leave together in one pipeline once Redis answers: the release of the big result first.
	must(t, rdb.Do(ctx, "client", "pause", 500, "all").Err())
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = l.Acquire(ctx, "first", "t", time.Minute) })
	time.Sleep(100 * time.Millisecond)
	wg.Go(func() { _ = l.Release(ctx, "big", "t", big, time.Minute) })
	time.Sleep(100 * time.Millisecond)
	var failed atomic.Int32
	var last atomic.Value
	for i := range 20 {
		wg.Go(func() {
			if _, err := l.Acquire(ctx, fmt.Sprint("other-", i), "t", time.Minute); err != nil {
				failed.Add(1)
				last.Store(err)
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of 20 Acquires of other keys failed beside a result Redis refused, the last with %v", n, last.Load())
	}
}
