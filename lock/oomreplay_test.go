package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/redis/go-redis/v9"
)

// TestFullRedisStillReplaysCachedResults: a Redis at its maxmemory with the noeviction policy refuses
// every command that may write, and SET ... NX ... GET is one even when the key holds a cached result
// it would not overwrite: Acquire failed with OOM where the result was there to replay, and a Guard
// failing closed answered ErrLockUnavailable to every duplicate of a finished key (found by a defect
// hunt; the script mode, which reads first, replayed them). An Acquire refused for want of memory now
// reads the key the way the script does: a cached result is replayed, and a free key is still an
// error (no lock can be taken).
func TestFullRedisStillReplaysCachedResults(t *testing.T) {
	p := testsvc.StartRedis(t, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
	rdb := redis.NewClient(p.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := testCtx(t)
	l := lock.New(rdb, nil)
	g := newGuard(t, memory.NewStore(), &idemkit.Options{Locker: l})
	call := idemkit.Call{Scope: "s", Key: "finished"}
	if _, err := g.Do(ctx, call, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	filler := strings.Repeat("x", 100)
	for i := 0; ; i++ {
		err := rdb.Set(ctx, fmt.Sprint("filler-", i), filler, 0).Err()
		if err == nil {
			continue
		}
		if !strings.HasPrefix(err.Error(), "OOM") {
			t.Fatal(err)
		}
		break
	}
	res, err := g.Do(ctx, call, func(context.Context) ([]byte, error) { return []byte("again"), nil })
	if err != nil || !res.Replayed || string(res.Value) != "v" {
		t.Fatalf("duplicate of a finished key on a full Redis = %+v, %v; want the cached result replayed", res, err)
	}
	if v, err := l.Acquire(ctx, "free", "t", time.Minute); err == nil || errors.Is(err, idemkit.ErrLocked) {
		t.Fatalf("Acquire of a free key on a full Redis = %q, %v; want Redis's refusal", v, err)
	}
}
