package main

import (
	"context"
	"testing"

	"github.com/idemkit/idemkit"
)

// TestInspectNamesTheRedisKey: inspect --json gave only lock_key, the Guard's lock key before the
// Locker's prefix and hash tag, which no redis-cli command finds; an operator following a key into
// Redis had to rebuild the real one. The redis section now names it (found by a defect hunt).
func TestInspectNamesTheRedisKey(t *testing.T) {
	f := setup(t, "mysql")
	ctx := context.Background()
	call := idemkit.Call{Scope: "POST /orders", Key: "k-redis-key"}
	if _, err := f.guard.Do(ctx, call, func(context.Context) ([]byte, error) { return []byte(`{"order":1}`), nil }); err != nil {
		t.Fatal(err)
	}
	ins := jsonOf[inspectJSON](t, f.want(t, exitOK, nil, []string{"inspect", "--json", call.Scope, call.Key}))
	if ins.Redis == nil || !ins.Redis.Cached {
		t.Fatalf("inspect: %+v; want the result cached", ins)
	}
	if ins.Redis.Key == "" {
		t.Fatalf("inspect --json names no Redis key: %+v", ins.Redis)
	}
	if n, err := f.rdb.Exists(ctx, ins.Redis.Key).Result(); err != nil || n != 1 {
		t.Fatalf("redis key %q: exists %d, %v", ins.Redis.Key, n, err)
	}
}
