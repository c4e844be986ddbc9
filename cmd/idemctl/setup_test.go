package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
)

// The fixture's application: namespace, scope, lease and record lifetime.
const (
	testNS    = "shop"
	scopeA    = "POST /orders"
	scopeB    = "POST /refunds"
	testLease = time.Minute
	testTTL   = time.Hour
)

// fixture is a record table on one database, a Redis prefix, and a Guard writing to them with a
// manual clock, plus the environment idemctl gets.
type fixture struct {
	dialect string
	db      *gorm.DB
	dsn     string
	table   string
	store   *record.Store
	rdb     *redis.Client
	prefix  string
	clock   *idemtest.Clock
	guard   *idemkit.Guard
	env     map[string]string
}

// dialects are the databases every suite runs on.
var dialects = []string{"mysql", "postgres", "sqlite"}

func setup(t *testing.T, dialect string) *fixture {
	t.Helper()
	f := &fixture{dialect: dialect, table: testsvc.Name("idemctl_"), clock: idemtest.NewClock()}
	switch dialect {
	case "mysql":
		f.db = testsvc.MySQL(t, nil)
		f.dsn = "mysql://" + testsvc.MySQLDSN() + testsvc.Database
	case "postgres":
		f.db = testsvc.Postgres(t, nil)
		f.dsn = postgresURL(t, testsvc.PostgresDSN())
	case "sqlite":
		f.db = testsvc.SQLite(t, nil)
		f.dsn = "sqlite://" + sqlitePath(t, f.db)
	}
	var err error
	if f.store, err = record.New(f.db, &record.Options{Table: f.table}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := f.store.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	testsvc.DropTable(t, f.db, f.table)
	f.rdb = testsvc.Redis(t)
	f.prefix = testsvc.Name("idemctl-test-") + ":"
	testsvc.CleanRedis(t, f.rdb, f.prefix)
	f.guard = f.newGuard(t, testNS)
	f.env = map[string]string{
		"IDEMCTL_DB": f.dsn, "IDEMCTL_TABLE": f.table, "IDEMCTL_NAMESPACE": testNS,
		"IDEMCTL_REDIS": testsvc.RedisAddr(), "IDEMCTL_REDIS_PREFIX": f.prefix,
	}
	return f
}

// sqlitePath returns the file of db's main SQLite database.
func sqlitePath(t *testing.T, db *gorm.DB) string {
	t.Helper()
	var path string
	if err := db.Raw("SELECT file FROM pragma_database_list WHERE name = 'main'").Row().Scan(&path); err != nil {
		t.Fatal(err)
	}
	return path
}

// newGuard returns a Guard of the fixture's application, in namespace ns.
func (f *fixture) newGuard(t *testing.T, ns string) *idemkit.Guard {
	t.Helper()
	g, err := idemkit.New(f.store, &idemkit.Options{
		Namespace: ns, Locker: lock.New(f.rdb, &lock.Options{Prefix: f.prefix}),
		Lease: testLease, TTL: testTTL, Now: f.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// postgresURL turns the test's keyword DSN into the URL idemctl takes, on the test database.
func postgresURL(t *testing.T, dsn string) string {
	t.Helper()
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/" + testsvc.Database
		return u.String()
	}
	kv := map[string]string{}
	for _, f := range strings.Fields(dsn) {
		k, v, _ := strings.Cut(f, "=")
		kv[k] = v
	}
	u := &url.URL{Scheme: "postgres", Host: kv["host"] + ":" + kv["port"], Path: "/" + testsvc.Database}
	if kv["port"] == "" {
		u.Host = kv["host"]
	}
	if kv["password"] != "" {
		u.User = url.UserPassword(kv["user"], kv["password"])
	} else if kv["user"] != "" {
		u.User = url.User(kv["user"])
	}
	q := url.Values{}
	if kv["sslmode"] != "" {
		q.Set("sslmode", kv["sslmode"])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// result is one idemctl run.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// idemctl runs the command with the fixture's environment plus env ("KEY=value"), stdin as input.
func (f *fixture) idemctl(t *testing.T, stdin io.Reader, argv ...string) result {
	t.Helper()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	var out, errb bytes.Buffer
	code := runEnv(context.Background(), args{
		argv: argv, stdin: stdin, stdout: &out, stderr: &errb,
		getenv: func(k string) string { return f.env[k] }, now: f.clock.Now,
	})
	return result{code, out.String(), errb.String()}
}

// want runs idemctl and fails unless it exits with code and stderr contains every fragment.
func (f *fixture) want(t *testing.T, code int, stdin io.Reader, argv []string, fragments ...string) result {
	t.Helper()
	r := f.idemctl(t, stdin, argv...)
	if r.code != code {
		t.Fatalf("idemctl %q: %s\nwant exit %d", argv, r, code)
	}
	for _, fr := range fragments {
		if !strings.Contains(r.stderr+r.stdout, fr) {
			t.Fatalf("idemctl %q: %s\nwant output containing %q", argv, r, fr)
		}
	}
	return r
}

// jsonOf decodes stdout.
func jsonOf[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("decoding %s: %v", r, err)
	}
	return v
}

// snapshot is every row of the table and every Redis key of the fixture, for "nothing changed".
func (f *fixture) snapshot(t *testing.T) string {
	t.Helper()
	rows, err := f.db.Raw("SELECT scope, idem_key, status, fence, owner, fingerprint, gid, branch_id, response, error, " +
		"lease_until, expires_at, created_at, updated_at FROM " + f.table + " ORDER BY scope, idem_key").Rows()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var scope, key, status, owner, fp, gid, branch, errText string
		var resp []byte
		var fence, lease, exp, created, upd int64
		if err := rows.Scan(&scope, &key, &status, &fence, &owner, &fp, &gid, &branch, &resp, &errText, &lease, &exp, &created, &upd); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%q %q %s %d %q %q %q %q %x %q %d %d %d %d\n", scope, key, status, fence, owner, fp, gid, branch, resp, errText, lease, exp, created, upd)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys, err := f.rdb.Keys(ctx, f.prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, _ := f.rdb.Get(ctx, k).Result()
		fmt.Fprintf(&b, "redis %q %x\n", k, v)
	}
	return b.String()
}

// states are the records the fixture's populate writes, by key.
type states struct {
	ok, rejected, failed, live, stuck, gidClaim, expired, long string
	gid                                                        string
	stuckClaim, liveClaim                                      *idemkit.Claim
}

// populate writes a record in every state, all in scope A of the fixture's namespace unless said:
//
//	expired   SUCCEEDED, past its expiry (the sweeper deletes it)
//	stuck     PROCESSING, lease run out, no gid (the sweeper recovers it)
//	gidClaim  PROCESSING with a gid, lease run out (the reconciler's)
//	long      SUCCEEDED in scope B, with a key longer than MaxStoredLen (stored hashed)
//	ok        SUCCEEDED, result cached in Redis
//	rejected  REJECTED
//	failed    FAILED
//	live      PROCESSING, lease running, Redis lock held
//
// and a SUCCEEDED record of another namespace with ok's scope and key, which idemctl must never show.
func (f *fixture) populate(t *testing.T) *states {
	t.Helper()
	ctx := context.Background()
	s := &states{ok: "k-ok", rejected: "k-rej", failed: "k-fail", live: "k-live", stuck: "k-stuck", gidClaim: "k-gid",
		expired: "k-old", long: strings.Repeat("L", 200), gid: testsvc.Name("gid")}
	do := func(scope, key string, val []byte, err error) {
		t.Helper()
		fp := "fp-" + key
		if len(fp) > 64 {
			fp = "fp-long"
		}
		_, got := f.guard.Do(ctx, idemkit.Call{Scope: scope, Key: key, Fingerprint: fp}, func(context.Context) ([]byte, error) { return val, err })
		if (got == nil) != (err == nil) {
			t.Fatalf("Do %s: %v", key, got)
		}
	}
	do(scopeA, s.expired, []byte("old"), nil)
	f.clock.Advance(2 * testTTL)
	var err error
	if s.stuckClaim, _, err = f.guard.Begin(ctx, idemkit.Call{Scope: scopeA, Key: s.stuck}); err != nil || s.stuckClaim == nil {
		t.Fatalf("Begin stuck: %v", err)
	}
	gc, _, err := f.guard.Begin(ctx, idemkit.Call{Scope: scopeA, Key: s.gidClaim, GID: s.gid, BranchID: "01"})
	if err != nil || gc == nil {
		t.Fatalf("Begin gid: %v", err)
	}
	gc.Detach(ctx)
	do(scopeB, s.long, []byte("long"), nil)
	f.clock.Advance(testLease + time.Second)
	do(scopeA, s.ok, []byte(`{"order":"o-1"}`), nil)
	do(scopeA, s.rejected, nil, idemkit.Permanent(fmt.Errorf("insufficient funds")))
	do(scopeA, s.failed, nil, fmt.Errorf("payment service timed out"))
	if s.liveClaim, _, err = f.guard.Begin(ctx, idemkit.Call{Scope: scopeA, Key: s.live}); err != nil || s.liveClaim == nil {
		t.Fatalf("Begin live: %v", err)
	}
	other := f.newGuard(t, "other")
	if _, err := other.Do(ctx, idemkit.Call{Scope: scopeA, Key: s.ok}, func(context.Context) ([]byte, error) { return []byte("x"), nil }); err != nil {
		t.Fatal(err)
	}
	return s
}
