package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
)

// pools opens n independent gorm handles (own connection pools) on one database and a record Store on
// the same fresh table for each.
func pools(t *testing.T, open func(t testing.TB, cfg *gorm.Config) *gorm.DB, n int) []idemkit.Store {
	t.Helper()
	table := testsvc.Name("storm_")
	stores := make([]idemkit.Store, n)
	for i := range n {
		db := open(t, nil)
		sqlDB, err := db.DB()
		if err != nil {
			t.Fatal(err)
		}
		sqlDB.SetMaxOpenConns(8)
		s, err := record.New(db, &record.Options{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := s.CreateTable(context.Background()); err != nil {
				t.Fatal(err)
			}
			testsvc.DropTable(t, db, table)
		}
		stores[i] = s
	}
	return stores
}

// lockers returns n Lockers, each on its own Redis client, sharing one fresh prefix.
func lockers(t *testing.T, n int) []idemkit.Locker {
	t.Helper()
	prefix := testsvc.Name("storm") + ":"
	out := make([]idemkit.Locker, n)
	for i := range n {
		out[i] = lock.New(testsvc.Redis(t), &lock.Options{Prefix: prefix})
	}
	return out
}

// TestStormAcrossGuards: 64 goroutines spread over 3 independent Guards (separate connection pools
// and Redis clients, one table) submit the same key, then 200 keys at once; the function runs exactly
// once per key (in Tx mode: one transaction commits per key) and every caller gets the original
// result or ErrInFlight. With and without Redis, in Execute and in Tx mode.
func TestStormAcrossGuards(t *testing.T) {
	for _, db := range []struct {
		name string
		open func(t testing.TB, cfg *gorm.Config) *gorm.DB
	}{{"MariaDB", testsvc.MySQL}, {"PostgreSQL", testsvc.Postgres}} {
		t.Run(db.name+"/Redis", func(t *testing.T) {
			idemtest.Storm(t, idemtest.StormConfig{Stores: pools(t, db.open, 3), Lockers: lockers(t, 3)})
		})
		t.Run(db.name+"/DatabaseOnly", func(t *testing.T) {
			idemtest.Storm(t, idemtest.StormConfig{Stores: pools(t, db.open, 3)})
		})
		// Tx mode (Guard.Tx): the record is written once, in each call's own transaction.
		t.Run(db.name+"/Tx/Redis", func(t *testing.T) {
			idemtest.Storm(t, idemtest.StormConfig{Stores: pools(t, db.open, 3), Lockers: lockers(t, 3), Tx: true})
		})
		t.Run(db.name+"/Tx/DatabaseOnly", func(t *testing.T) {
			idemtest.Storm(t, idemtest.StormConfig{Stores: pools(t, db.open, 3), Tx: true})
		})
	}
	// Tx mode on MariaDB with multi-statement packets: the record's INSERT leaves with the COMMIT.
	t.Run("MariaDB-multi/Tx/Redis", func(t *testing.T) {
		idemtest.Storm(t, idemtest.StormConfig{Stores: pools(t, testsvc.MySQLMulti, 3), Lockers: lockers(t, 3), Tx: true})
	})
	t.Run("MariaDB-multi/Tx/DatabaseOnly", func(t *testing.T) {
		idemtest.Storm(t, idemtest.StormConfig{Stores: pools(t, testsvc.MySQLMulti, 3), Tx: true})
	})
}

// TestDatabaseUnreachable cuts the connection to MariaDB mid-test: calls fail with
// ErrStoreUnavailable, nothing runs, the Redis lock is released; once the database is back the same
// keys run exactly once.
func TestDatabaseUnreachable(t *testing.T) {
	ctx := context.Background()
	base := testsvc.MySQL(t, nil) // creates the database, proves the server is up
	table := testsvc.Name("cut_")
	direct, err := record.New(base, &record.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := direct.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	testsvc.DropTable(t, base, table)

	proxy := testsvc.StartProxy(t, "127.0.0.1:3306")
	dsn := strings.Replace(testsvc.MySQLDSN(), "127.0.0.1:3306", proxy.Addr(), 1) + testsvc.Database + "?timeout=2s&readTimeout=2s&writeTimeout=2s"
	db, err := gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	store, err := record.New(db, &record.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	rdb := testsvc.Redis(t)
	prefix := testsvc.Name("cut") + ":"
	g, err := idemkit.New(store, &idemkit.Options{Locker: lock.New(rdb, &lock.Options{Prefix: prefix}), FinishTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	fn := func(key string) idemkit.Func {
		return func(context.Context) ([]byte, error) { runs[key]++; return []byte("v-" + key), nil }
	}
	if _, err := g.Do(ctx, idemkit.Call{Scope: "s", Key: "before"}, fn("before")); err != nil {
		t.Fatal(err)
	}

	proxy.Cut()
	for i := range 5 {
		key := fmt.Sprintf("k%d", i)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := g.Do(cctx, idemkit.Call{Scope: "s", Key: key}, fn(key))
		cancel()
		if !errors.Is(err, idemkit.ErrStoreUnavailable) {
			t.Fatalf("with the database cut: %v, want ErrStoreUnavailable", err)
		}
		// The lock was released: no key is left locked in Redis.
		if n, _ := rdb.Exists(ctx, prefix+"{"+lockKey("s", key)+"}").Result(); n != 0 {
			t.Fatalf("lock of %s left behind", key)
		}
	}
	if len(runs) != 1 {
		t.Fatalf("functions ran while the database was cut: %v", runs)
	}

	proxy.Restore()
	for range 2 {
		for i := range 5 {
			key := fmt.Sprintf("k%d", i)
			res, err := g.Do(ctx, idemkit.Call{Scope: "s", Key: key}, fn(key))
			if err != nil || string(res.Value) != "v-"+key {
				t.Fatalf("after restore: %+v %v", res, err)
			}
		}
	}
	for i := range 5 {
		if n := runs[fmt.Sprintf("k%d", i)]; n != 1 {
			t.Fatalf("k%d ran %d times after restore, want 1", i, n)
		}
	}
}

// lockKey mirrors the Guard's unambiguous lock key for short scopes and keys.
func lockKey(scope, key string) string { return fmt.Sprintf("%d:%s:%s", len(scope), scope, key) }
