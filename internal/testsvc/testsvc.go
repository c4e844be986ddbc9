// Package testsvc connects tests to the real services they need: MariaDB/MySQL, PostgreSQL, Redis.
//
// Addresses come from the environment, with the local defaults the test script brings up:
//
//	IDEMKIT_TEST_REDIS     127.0.0.1:6379
//	IDEMKIT_TEST_MYSQL     root:@tcp(127.0.0.1:3306)/   (database idemkit_test is created)
//	IDEMKIT_TEST_POSTGRES  host=127.0.0.1 port=5432 user=postgres sslmode=disable   (database idemkit_test is created)
//
// A missing service fails the test when IDEMKIT_REQUIRE_SERVICES=1 (the test script and CI set it) and
// skips it, saying why, otherwise.
package testsvc

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Database is the database created on MySQL and PostgreSQL for tests.
const Database = "idemkit_test"

// Env returns the environment variable name's value or def.
func Env(name, def string) string { return cmp.Or(os.Getenv(name), def) }

// RedisAddr is the test Redis address.
func RedisAddr() string { return Env("IDEMKIT_TEST_REDIS", "127.0.0.1:6379") }

// MySQLDSN is the DSN of the test MySQL server, without a database.
func MySQLDSN() string { return Env("IDEMKIT_TEST_MYSQL", "root:@tcp(127.0.0.1:3306)/") }

// PostgresDSN is the DSN of the test PostgreSQL server, without a database.
func PostgresDSN() string {
	return Env("IDEMKIT_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres sslmode=disable")
}

// Required reports whether missing services must fail tests rather than skip them.
func Required() bool { return os.Getenv("IDEMKIT_REQUIRE_SERVICES") == "1" }

// Unavailable fails or skips t because the service named what is unreachable.
func Unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if Required() {
		t.Fatalf("%s unavailable (IDEMKIT_REQUIRE_SERVICES=1): %v", what, err)
	}
	t.Skipf("%s unavailable, skipping (run the test script to start it): %v", what, err)
}

// Name returns a unique lowercase identifier starting with prefix, for tables and keys.
func Name(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// RedisOptions returns options for the test Redis with ContextTimeoutEnabled set.
func RedisOptions() *redis.Options {
	return &redis.Options{Addr: RedisAddr(), ContextTimeoutEnabled: true, DialTimeout: 2 * time.Second}
}

// Redis returns a client of the test Redis, closed when t ends.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(RedisOptions())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		Unavailable(t, "Redis at "+RedisAddr(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var gormConfig = &gorm.Config{Logger: logger.Discard}

var created sync.Map // dialect → error of creating Database

func ensureDatabase(dialect string, open func() (*gorm.DB, error), stmt string) error {
	v, _ := created.LoadOrStore(dialect, new(sync.Once))
	once := v.(*sync.Once)
	var err error
	once.Do(func() {
		var db *gorm.DB
		if db, err = open(); err != nil {
			created.Store(dialect+".err", err)
			return
		}
		sqlDB, _ := db.DB()
		defer sqlDB.Close()
		if e := db.Exec(stmt).Error; e != nil && !strings.Contains(e.Error(), "already exists") {
			created.Store(dialect+".err", e)
		}
	})
	if e, ok := created.Load(dialect + ".err"); ok {
		return e.(error)
	}
	return nil
}

// MySQL returns a gorm handle on the test database of the MySQL/MariaDB server, closed when t ends.
// Configure it with cfg (nil for the silent default).
func MySQL(t testing.TB, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	return MySQLWith(t, cfg, "")
}

// MySQLMulti is [MySQL] on a DSN that allows several statements in a packet and interpolates
// arguments (multiStatements=true&interpolateParams=true).
func MySQLMulti(t testing.TB, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	return MySQLWith(t, cfg, "&multiStatements=true&interpolateParams=true")
}

// MySQLWith is [MySQL] with more DSN parameters, each starting with '&'.
func MySQLWith(t testing.TB, cfg *gorm.Config, params string) *gorm.DB {
	t.Helper()
	base := MySQLDSN()
	err := ensureDatabase("mysql", func() (*gorm.DB, error) { return gorm.Open(mysql.Open(base+"?timeout=3s"), gormConfig) },
		"CREATE DATABASE IF NOT EXISTS "+Database)
	if err != nil {
		Unavailable(t, "MySQL at "+base, err)
	}
	return open(t, "MySQL", mysql.Open(base+Database+"?timeout=3s&lock_wait_timeout=120&innodb_lock_wait_timeout=60"+params), cfg)
}

// Postgres returns a gorm handle on the test database of the PostgreSQL server, closed when t ends.
func Postgres(t testing.TB, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	return PostgresWith(t, cfg, "")
}

// PostgresWith is [Postgres] with more DSN settings, each starting with a space (" lock_timeout=300").
func PostgresWith(t testing.TB, cfg *gorm.Config, params string) *gorm.DB {
	t.Helper()
	base := PostgresDSN()
	err := ensureDatabase("postgres", func() (*gorm.DB, error) {
		return gorm.Open(postgres.Open(base+" dbname=postgres connect_timeout=3"), gormConfig)
	}, "CREATE DATABASE "+Database)
	if err != nil {
		Unavailable(t, "PostgreSQL at "+base, err)
	}
	return open(t, "PostgreSQL", postgres.Open(base+" dbname="+Database+" connect_timeout=3"+params), cfg)
}

// SQLite returns a gorm handle on a fresh SQLite file in t's temporary directory (pure Go driver,
// WAL mode, 5s busy timeout), closed when t ends.
func SQLite(t testing.TB, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	path := t.TempDir() + "/test.db"
	return open(t, "SQLite", sqlite.Open(path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"), cfg)
}

func open(t testing.TB, what string, d gorm.Dialector, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	if cfg == nil {
		cfg = &gorm.Config{Logger: logger.Discard}
	}
	db, err := gorm.Open(d, cfg)
	if err != nil {
		Unavailable(t, what, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := sqlDB.PingContext(ctx); err != nil {
		_ = sqlDB.Close()
		Unavailable(t, what, err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

// DropTable drops table when t ends.
func DropTable(t testing.TB, db *gorm.DB, table string) {
	t.Helper()
	t.Cleanup(func() {
		if err := db.Exec(fmt.Sprintf("DROP TABLE IF EXISTS %s", table)).Error; err != nil {
			t.Logf("dropping %s: %v", table, err)
		}
	})
}

// CleanRedis deletes every key starting with prefix when t ends.
func CleanRedis(t testing.TB, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Logf("scanning %s*: %v", prefix, err)
			return
		}
		for batch := range slices.Chunk(keys, 500) {
			if err := rdb.Del(ctx, batch...).Err(); err != nil {
				t.Logf("deleting %s*: %v", prefix, err)
			}
		}
	})
}
