package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
)

// TestLuaInjection (docs/SECURITY.md): keys and values reach the scripts only as KEYS and ARGV, never
// as script text, so hostile keys and results are data: nothing else in Redis is touched and they
// round-trip unchanged.
func TestLuaInjection(t *testing.T) {
	rdb := testsvc.Redis(t)
	ctx := context.Background()
	prefix := testsvc.Name("inj") + ":"
	sentinel := prefix + "sentinel"
	if err := rdb.Set(ctx, sentinel, "alive", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), sentinel) })
	l := lock.New(rdb, &lock.Options{Prefix: prefix})
	hostile := []string{
		`"); redis.call('FLUSHALL') --`,
		`]] redis.call('DEL', '` + sentinel + `') --[[`,
		"key\r\nFLUSHALL\r\n",
		`{}}{{`,
		"%';return 1;--",
	}
	for _, k := range hostile {
		if _, err := l.Acquire(ctx, k, "tok", time.Minute); err != nil {
			t.Fatalf("Acquire(%q): %v", k, err)
		}
		result := []byte("redis.call('FLUSHALL')" + k)
		if err := l.Release(ctx, k, "tok", result, time.Minute); err != nil {
			t.Fatalf("Release(%q): %v", k, err)
		}
		cached, err := l.Acquire(ctx, k, "other", time.Minute)
		if err != nil || string(cached) != string(result) {
			t.Fatalf("cached result for %q: %q, %v", k, cached, err)
		}
	}
	if v, err := rdb.Get(ctx, sentinel).Result(); err != nil || v != "alive" {
		t.Fatalf("sentinel after hostile keys: %q, %v", v, err)
	}
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), keys...) })
}
