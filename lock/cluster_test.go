package lock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/redis/go-redis/v9"
)

// startCluster starts a private one-node Redis Cluster owning every slot. A one-node cluster still
// refuses a command whose keys are in different slots (CROSSSLOT), which is what the hash tags must
// prevent.
func startCluster(t *testing.T) (*redis.ClusterClient, *redis.Client) {
	t.Helper()
	p := testsvc.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-announce-ip", "127.0.0.1")
	node := redis.NewClient(p.Options())
	t.Cleanup(func() { _ = node.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := node.ClusterAddSlotsRange(ctx, 0, 16383).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	for {
		info, err := node.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("cluster did not reach state ok: %v %q", err, info)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{p.Addr()}, ContextTimeoutEnabled: true, DialTimeout: 2 * time.Second,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc, node
}

func TestClusterHashTags(t *testing.T) {
	cc, node := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// The server agrees with the slot computation the other tests rely on.
	for _, k := range []string{"foo", "{a}b", "x{}y", "idemkit:{}}:lock", "idemkit:{%}:result"} {
		want, err := node.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(k); int64(got) != want {
			t.Fatalf("keySlot(%q) = %d, CLUSTER KEYSLOT = %d", k, got, want)
		}
	}
	// The cluster does refuse cross-slot scripts: a control for the test below.
	err := cc.Eval(ctx, "return redis.call('EXISTS', KEYS[1], KEYS[2])", []string{"idemkit:{a}:lock", "idemkit:{b}:result"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a cross-slot script gave %v; want a CROSSSLOT error", err)
	}

	l := New(cc, nil)
	for _, key := range trickyKeys {
		a := "tok-a"
		if v, err := l.Acquire(ctx, key, a, time.Minute); err != nil || v != nil {
			t.Fatalf("key %q: Acquire = %q, %v", key, v, err)
		}
		if _, err := l.Acquire(ctx, key, "tok-b", time.Minute); !errors.Is(err, idemkit.ErrLocked) {
			t.Fatalf("key %q: second Acquire = %v; want ErrLocked", key, err)
		}
		if err := l.Refresh(ctx, key, a, time.Minute); err != nil {
			t.Fatalf("key %q: Refresh = %v", key, err)
		}
		if err := l.Release(ctx, key, a, []byte("v:"+key), time.Minute); err != nil {
			t.Fatalf("key %q: Release = %v", key, err)
		}
		if v, err := l.Acquire(ctx, key, "tok-c", time.Minute); err != nil || string(v) != "v:"+key {
			t.Fatalf("key %q: cached Acquire = %q, %v", key, v, err)
		}
	}
}
