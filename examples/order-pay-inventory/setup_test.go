package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// tLog writes lines to t.Log.
type tLog struct{ t testing.TB }

func (w tLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// needDTM makes sure a DTM server binary is built (or cached) before a test starts one, and fails or
// skips t like testsvc does when it cannot be.
func needDTM(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if _, err := dtmserver.Build(ctx, tLog{t}); err != nil {
		testsvc.Unavailable(t, "DTM server", err)
	}
}

// testConfig is the configuration of the tests: short waits, fast retries and sweeps.
func testConfig() Config {
	return Config{
		Listen:         "127.0.0.1:0",
		Wait:           3 * time.Second,
		ReconcileAfter: 5 * time.Second,
		SweepInterval:  500 * time.Millisecond,
		RetryInterval:  time.Second,
		TimeoutToFail:  10 * time.Second,
		LogLevel:       "warn",
	}
}

// startServices starts the services with cfg and stops them when t ends; their warnings go to t.Log.
func startServices(t *testing.T, cfg Config) *Services {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(tLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := Start(ctx, cfg, RunOptions{Logger: logger, BuildProgress: tLog{t}})
	if err != nil {
		t.Fatalf("starting the services: %v", err)
	}
	t.Cleanup(func() {
		if err := svc.Close(); err != nil {
			t.Errorf("stopping the services: %v", err)
		}
		if t.Failed() {
			if log := svc.DTMLog(); log != "" {
				t.Logf("DTM server log:\n%s", lastLines(log, 60))
			}
		}
	})
	return svc
}

// stockedShop starts the services with embedded defaults on a data dir of their own, sets account
// user's balance to 10,000 and SKU sku's stock to 10, and returns them with a client and a context
// bounded by a minute (both ended when t ends).
func stockedShop(t *testing.T, user, sku string) (*Services, *client, context.Context) {
	t.Helper()
	needDTM(t)
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	svc := startServices(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c := newClient(svc.URL)
	if err := c.put(ctx, "/api/accounts/"+user, map[string]int64{"balance": 10_000}); err != nil {
		t.Fatal(err)
	}
	if err := c.put(ctx, "/api/inventory/"+sku, map[string]int64{"stock": 10}); err != nil {
		t.Fatal(err)
	}
	return svc, c, ctx
}

// mariaDBConfig returns testConfig on the test MariaDB, Redis and a DTM server of its own, with tables
// and Redis keys of its own, all removed when t ends.
func mariaDBConfig(t *testing.T) Config {
	t.Helper()
	db := testsvc.MySQL(t, nil)
	rdb := testsvc.Redis(t)
	srv := dtmserver.StartT(t)
	cfg := testConfig()
	cfg.DB = "mysql://" + testsvc.MySQLDSN() + testsvc.Database
	cfg.Redis = testsvc.RedisAddr()
	cfg.DTM = srv.URL()
	cfg.TablePrefix = testsvc.Name("opi_") + "_"
	cfg.RedisPrefix = cfg.TablePrefix + ":"
	for _, table := range []string{tableOrders, tableAccounts, tableInventory, tableRecords, tableBarrier} {
		testsvc.DropTable(t, db, cfg.TablePrefix+table)
	}
	t.Cleanup(func() { deleteKeys(t, rdb, cfg.RedisPrefix) })
	return cfg
}

// deleteKeys deletes the Redis keys starting with prefix.
func deleteKeys(t *testing.T, rdb *redis.Client, prefix string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Logf("scanning Redis keys %s*: %v", prefix, err)
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := rdb.Del(ctx, keys[:n]...).Err(); err != nil {
			t.Logf("deleting Redis keys: %v", err)
			return
		}
		keys = keys[n:]
	}
}
