package lock_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/lock"
	"github.com/redis/go-redis/v9"
)

// serverError is an error reply from Redis (go-redis's redis.Error).
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// oldRedis plays a Redis before 7.0 in front of a real one: it refuses SET with both NX and GET the
// way Redis 6.2 does ("ERR syntax error"), and, as 6.0, SET with GET at all when before62 is set.
type oldRedis struct {
	*redis.Client
	before62 bool
	refused  atomic.Int32
}

func (o *oldRedis) Process(ctx context.Context, cmd redis.Cmder) error {
	if cmd.Name() == "set" {
		var nx, get bool
		for _, a := range cmd.Args()[3:] {
			s, _ := a.(string)
			nx = nx || strings.EqualFold(s, "nx")
			get = get || strings.EqualFold(s, "get")
		}
		if get && (nx || o.before62) {
			o.refused.Add(1)
			cmd.SetErr(serverError("ERR syntax error"))
			return cmd.Err()
		}
	}
	return o.Client.Process(ctx, cmd)
}

// TestOldRedisFallback: on a server that refuses SET ... NX ... GET the Locker switches to its Lua
// scripts after the first refusal, once, and then passes the whole Locker suite.
func TestOldRedisFallback(t *testing.T) {
	for _, before62 := range []bool{false, true} {
		t.Run(map[bool]string{false: "6.2", true: "6.0"}[before62], func(t *testing.T) {
			_, b := setup(t)
			counter := &cmdCounter{}
			rdb := redis.NewClient(b.rdb.Options())
			t.Cleanup(func() { _ = rdb.Close() })
			rdb.AddHook(counter)
			old := &oldRedis{Client: rdb, before62: before62}
			l := lock.New(old, &lock.Options{Prefix: b.prefix})
			ctx := testCtx(t)
			if l.Scripts() {
				t.Fatal("a new Locker starts in script mode")
			}
			must(t, rdb.Ping(ctx).Err()) // connect outside the counts
			counter.take()
			if v, err := l.Acquire(ctx, "k", "tok", time.Minute); err != nil || v != nil {
				t.Fatalf("first Acquire on an old Redis = %q, %v; want the lock", v, err)
			}
			// The refused SET never reached the server (the stand-in refused it); the script did.
			if got := counter.take(); !slices.Equal(got, []string{"evalsha"}) && !slices.Equal(got, []string{"evalsha", "eval"}) {
				t.Fatalf("first Acquire sent %v after the refused set; want the acquire script", got)
			}
			if !l.Scripts() || old.refused.Load() != 1 {
				t.Fatalf("after a refusal: Scripts() = %v, %d refused commands; want true and 1", l.Scripts(), old.refused.Load())
			}
			if _, err := l.Acquire(ctx, "k", "other", time.Minute); !isInFlight(err) {
				t.Fatalf("duplicate Acquire = %v; want in flight", err)
			}
			must(t, l.Release(ctx, "k", "tok", []byte("r"), time.Minute))
			if got := counter.take(); slices.Contains(got, "set") {
				t.Fatalf("after the switch the Locker still sent %v", got)
			}
			idemtest.RunLocker(t, func(t *testing.T) idemkit.Locker {
				_, b := setup(t)
				return lock.New(&oldRedis{Client: rdb, before62: before62}, &lock.Options{Prefix: b.prefix})
			})
		})
	}
}

func isInFlight(err error) bool {
	_, ok := err.(*idemkit.InFlightError)
	return ok
}
