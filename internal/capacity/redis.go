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

	"github.com/idemkit/idemkit/internal/cluster"
	"github.com/idemkit/idemkit/lock"
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

func redisCPU(ctx context.Context, c *redis.Client) (float64, error) {
	u, err := redisInfo(ctx, c, "cpu", "used_cpu_user")
	if err != nil {
		return 0, err
	}
	s, err := redisInfo(ctx, c, "cpu", "used_cpu_sys")
	return u + s, err
}

func measureRedis(ctx context.Context, rn *cluster.RedisNode, r *Report, o *Options) error {
	c := redis.NewClient(&redis.Options{Addr: rn.Addr(), ContextTimeoutEnabled: true, PoolSize: o.Concurrency + 4})
	defer c.Close()
	if v, err := c.Info(ctx, "server").Result(); err == nil {
		for l := range strings.SplitSeq(v, "\n") {
			if s, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
				r.Redis = s
			}
		}
	}
	l := lock.New(c, &lock.Options{Prefix: "capacity:"})
	keys := make([]string, o.Records)
	tokens := make([]string, o.Records)
	for i := range keys {
		keys[i] = "POST /api/orders\x00" + newKey()
		tokens[i] = newKey()[:32]
	}
	result := make([]byte, o.ResultSize)
	_, _ = rand.Read(result)
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
	var err error
	if r.RedisBytesPerLock, r.RedisAcquireMicros, err = phase(func(i int) error {
		_, err := l.Acquire(ctx, keys[i], tokens[i], 10*time.Minute)
		return err
	}); err != nil {
		return err
	}
	var perReleaseDelta float64
	if perReleaseDelta, r.RedisReleaseMicros, err = phase(func(i int) error {
		return l.Release(ctx, keys[i], tokens[i], result, time.Hour)
	}); err != nil {
		return err
	}
	r.RedisBytesPerCached = r.RedisBytesPerLock + perReleaseDelta
	_, r.RedisReplayMicros, err = phase(func(i int) error {
		v, err := l.Acquire(ctx, keys[i], "replayer", 10*time.Minute)
		if err == nil && v == nil {
			err = errors.New("a cached result was not found")
		}
		return err
	})
	return err
}
