//go:build linux

package capacity

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
)

// redisInfo returns the numeric field of INFO section.
func redisInfo(ctx context.Context, c *redis.Client, section, field string) (float64, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	for l := range strings.SplitSeq(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("INFO %s has no %s", section, field)
}

// redisCPU returns the CPU time redis-server has used, in seconds.
func redisCPU(ctx context.Context, c *redis.Client) (float64, error) {
	u, err := redisInfo(ctx, c, "cpu", "used_cpu_user")
	if err != nil {
		return 0, err
	}
	s, err := redisInfo(ctx, c, "cpu", "used_cpu_sys")
	return u + s, err
}

// redisVersion returns the server's version, or "unknown".
func redisVersion(ctx context.Context, c *redis.Client) string {
	if v, err := c.Info(ctx, "server").Result(); err == nil {
		for l := range strings.SplitSeq(v, "\n") {
			if s, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
				return s
			}
		}
	}
	return "unknown"
}

// cachedValue returns what a Guard caches for a call finished with a result of size bytes and an
// HTTP-like fingerprint (64 hex characters): it runs one call through a Guard with l as its Locker
// (on an in-memory Store) and reads the value back as a duplicate would.
func cachedValue(ctx context.Context, l *lock.Locker, size int) ([]byte, error) {
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Locker: l})
	if err != nil {
		return nil, err
	}
	result := make([]byte, size)
	_, _ = rand.Read(result)
	c := idemkit.Call{Scope: "POST /api/orders", Key: newKey(), Fingerprint: (newKey() + newKey())[:64]}
	if _, err := g.Do(ctx, c, func(context.Context) ([]byte, error) { return result, nil }); err != nil {
		return nil, err
	}
	ad, err := g.Address(c.Scope, c.Key)
	if err != nil {
		return nil, err
	}
	v, err := l.Acquire(ctx, ad.LockKey, "probe", time.Minute)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, errors.New("the Guard cached no result")
	}
	_ = l.Release(ctx, ad.LockKey, "probe", nil, 0)
	return v, nil
}

// measureRedis measures Redis memory and CPU through the Locker, on the Guard's own key format (one
// key per call, "<prefix>{<len>:<scope>:<key>}") and with Guard-sized tokens: o.Records locks, then
// the same keys holding the value a Guard caches for an o.ResultSize-byte result, then one replay of
// each. It empties the Redis first (a private server: the write measurements left their keys).
func measureRedis(ctx context.Context, c *redis.Client, r *Report, o *Options) error {
	if err := c.FlushAll(ctx).Err(); err != nil {
		return err
	}
	l := lock.New(c, &lock.Options{Prefix: "capacity:"})
	value, err := cachedValue(ctx, l, o.ResultSize)
	if err != nil {
		return err
	}
	r.CachedValueSize = int64(len(value))
	if err := c.FlushAll(ctx).Err(); err != nil {
		return err
	}
	keys := make([]string, o.Records)
	tokens := make([]string, o.Records)
	for i := range keys {
		keys[i] = idemkit.LockKey("POST /api/orders", newKey())
		tokens[i] = newKey()[:32]
	}
	phase := func(f func(i int) error) (memDelta, cpuMicros float64, err error) {
		m0, err := redisInfo(ctx, c, "memory", "used_memory")
		if err != nil {
			return 0, 0, err
		}
		c0, err := redisCPU(ctx, c)
		if err != nil {
			return 0, 0, err
		}
		var next atomic.Int64
		var first error
		var once sync.Once
		var wg sync.WaitGroup
		for range o.Concurrency {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(keys) {
						return
					}
					if err := f(i); err != nil {
						once.Do(func() { first = err })
						return
					}
				}
			})
		}
		wg.Wait()
		if first != nil {
			return 0, 0, first
		}
		m1, err := redisInfo(ctx, c, "memory", "used_memory")
		if err != nil {
			return 0, 0, err
		}
		c1, err := redisCPU(ctx, c)
		if err != nil {
			return 0, 0, err
		}
		n := float64(len(keys))
		return (m1 - m0) / n, (c1 - c0) * 1e6 / n, nil
	}
	if r.RedisBytesPerLock, r.RedisAcquireMicros, err = phase(func(i int) error {
		v, err := l.Acquire(ctx, keys[i], tokens[i], 10*time.Minute)
		if err == nil && v != nil {
			err = errors.New("a new key held a cached result")
		}
		return err
	}); err != nil {
		return err
	}
	var perReleaseDelta float64
	if perReleaseDelta, r.RedisReleaseMicros, err = phase(func(i int) error {
		return l.Release(ctx, keys[i], tokens[i], value, idemkit.DefaultTTL) // CacheTTL defaults to TTL
	}); err != nil {
		return err
	}
	// The result replaced the lock in the same key: the key's memory is the lock's plus the change.
	r.RedisBytesPerCached = r.RedisBytesPerLock + perReleaseDelta
	_, r.RedisReplayMicros, err = phase(func(i int) error {
		v, err := l.Acquire(ctx, keys[i], "replayer", 10*time.Minute)
		if err == nil && len(v) != len(value) {
			err = fmt.Errorf("a cached result of %d bytes came back as %d", len(value), len(v))
		}
		return err
	})
	return err
}
