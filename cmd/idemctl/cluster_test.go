//go:build unix

package main

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/cluster"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
)

// TestRedisCluster: with --redis naming a Redis Cluster's nodes, inspect reads the lock and the cached
// result the application's Locker wrote on the cluster, and release deletes the holder's lock there.
func TestRedisCluster(t *testing.T) {
	rc := cluster.StartRedisClusterT(t, &cluster.RedisClusterOptions{Replicas: -1})
	rdb := rc.NewClient(nil)
	t.Cleanup(func() { _ = rdb.Close() })

	db := testsvc.SQLite(t, nil)
	table := testsvc.Name("idemctl_")
	store, err := record.New(db, &record.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := store.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	const prefix = "idemctl-cluster:"
	f := &fixture{db: db, table: table, clock: idemtest.NewClock()}
	f.env = map[string]string{
		"IDEMCTL_DB": "sqlite://" + sqlitePath(t, db), "IDEMCTL_TABLE": table, "IDEMCTL_NAMESPACE": testNS,
		"IDEMCTL_REDIS": strings.Join(rc.Addrs(), ","), "IDEMCTL_REDIS_PREFIX": prefix,
	}
	lk := lock.New(rdb, &lock.Options{Prefix: prefix})
	g, err := idemkit.New(store, &idemkit.Options{Namespace: testNS, Locker: lk, Lease: testLease, TTL: testTTL, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}

	// A finished key (its result cached) and a claim whose lease ran out (its lock still held).
	if _, err := g.Do(ctx, idemkit.Call{Scope: scopeA, Key: "k-done"}, func(context.Context) ([]byte, error) {
		return []byte(`{"order":"o-1"}`), nil
	}); err != nil {
		t.Fatal(err)
	}
	claim, res, err := g.Begin(ctx, idemkit.Call{Scope: scopeA, Key: "k-stuck"})
	if err != nil || claim == nil {
		t.Fatalf("claim: %+v %v", res, err)
	}
	f.clock.Advance(2 * testLease)

	done := jsonOf[inspectJSON](t, f.want(t, exitOK, nil, []string{"inspect", "--json", scopeA, "k-done"}))
	if done.Redis == nil || !done.Redis.Cached || done.Redis.Locked {
		t.Fatalf("inspect of a finished key on the cluster: %+v", done.Redis)
	}
	stuck := jsonOf[inspectJSON](t, f.want(t, exitOK, nil, []string{"inspect", "--json", scopeA, "k-stuck"}))
	if stuck.Redis == nil || !stuck.Redis.Locked || stuck.Redis.LockToken != claim.Record().Owner || !stuck.Record.Stuck {
		t.Fatalf("inspect of a stuck claim on the cluster: %+v %+v", stuck.Record, stuck.Redis)
	}

	f.want(t, exitOK, nil, []string{"release", "--yes", scopeA, "k-stuck"}, "released")
	if n, err := rdb.Exists(ctx, lk.Key(stuck.LockKey)).Result(); err != nil || n != 0 {
		t.Fatalf("release left the holder's lock on the cluster: %d %v", n, err)
	}
	if _, err := g.Do(ctx, idemkit.Call{Scope: scopeA, Key: "k-stuck"}, func(context.Context) ([]byte, error) {
		return []byte("retried"), nil
	}); err != nil {
		t.Fatalf("retry after release: %v", err)
	}

	f.want(t, exitUsage, nil, []string{"inspect", "--redis", "redis://a:1,b:2", scopeA, "k-done"}, "seed nodes")
}
