package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/redis/go-redis/v9"
)

// lostRelease fails the first release of a lock (a fill, SET ... GET without NX, or the release
// script) before sending it, as a connection Redis dropped at that moment does on a client that does
// not retry (MaxRetries -1, which the README suggests with FailOpen).
type lostRelease struct {
	*redis.Client
	failed atomic.Bool
	onFail func() // run when the release fails, when set
}

func (c *lostRelease) Process(ctx context.Context, cmd redis.Cmder) error {
	if cmd.Name() == "set" && !hasArg(cmd, "nx") && c.failed.CompareAndSwap(false, true) {
		if c.onFail != nil {
			c.onFail()
		}
		cmd.SetErr(errInjected)
		return errInjected
	}
	return c.Client.Process(ctx, cmd)
}

func hasArg(cmd redis.Cmder, want string) bool {
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.EqualFold(s, want) {
			return true
		}
	}
	return false
}

// TestFailedReleaseIsRetried: a finished call whose release (the fill that replaces its lock with
// the result) failed once must not leave its lock behind: duplicates of the finished key were
// answered "in flight" until LockTTL ran out, and a Tx-mode duplicate after it, vouched for by a
// cache that never got the result, ran its function again. The release is retried in the
// background, and a duplicate is answered with the stored result.
func TestFailedReleaseIsRetried(t *testing.T) {
	_, b := setup(t)
	ctx := testCtx(t)
	client := &lostRelease{Client: b.rdb}
	g := newGuard(t, memory.NewStore(), &idemkit.Options{
		Locker: lock.New(client, &lock.Options{Prefix: b.prefix}), LockTTL: time.Hour, Lease: time.Hour,
	})
	call := idemkit.Call{Scope: "s", Key: "k"}
	if _, err := g.Do(ctx, call, func(context.Context) ([]byte, error) { return []byte("done"), nil }); err != nil {
		t.Fatal(err)
	}
	if !client.failed.Load() {
		t.Fatal("the release was not sent")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := g.Do(ctx, call, nil2)
		if err == nil && res.Replayed && string(res.Value) == "done" {
			return
		}
		if !errors.Is(err, idemkit.ErrInFlight) || time.Now().After(deadline) {
			t.Fatalf("duplicate of a finished key whose release failed = %+v, %v; want the stored result", res, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRetriedReleaseKeepsTheCacheWithinTheRecord: the retried release caches the result for what is
// left of the time to live the first release had, which ends with the record. It was counted again
// from after the failed release, so a release that failed slowly cached the result past the record's
// expiry, answering duplicates of a key the store no longer counts. The Guard's clock moves 30
// minutes while the release fails; the record lives an hour.
func TestRetriedReleaseKeepsTheCacheWithinTheRecord(t *testing.T) {
	_, b := setup(t)
	ctx := testCtx(t)
	clock := idemtest.NewClock()
	client := &lostRelease{Client: b.rdb, onFail: func() { clock.Advance(30 * time.Minute) }}
	g := newGuard(t, memory.NewStore(), &idemkit.Options{
		Locker: lock.New(client, &lock.Options{Prefix: b.prefix}), LockTTL: time.Hour, Lease: time.Hour, TTL: time.Hour, Now: clock.Now,
	})
	call := idemkit.Call{Scope: "s", Key: "k"}
	if _, err := g.Do(ctx, call, func(context.Context) ([]byte, error) { return []byte("done"), nil }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		keys, err := b.rdb.Keys(ctx, b.prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 1 {
			if v, err := b.rdb.Get(ctx, keys[0]).Result(); err == nil && !strings.HasPrefix(v, "L") {
				ttl, err := b.rdb.PTTL(ctx, keys[0]).Result()
				if err != nil {
					t.Fatal(err)
				}
				if ttl > 31*time.Minute {
					t.Fatalf("cached for %s after the retry; the record expires in 30 minutes", ttl)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retried release did not cache the result (keys %v)", keys)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
