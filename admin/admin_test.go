package admin_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
)

var dialects = map[string]func(testing.TB, *gorm.Config) *gorm.DB{
	"mysql": testsvc.MySQL, "postgres": testsvc.Postgres, "sqlite": testsvc.SQLite,
}

// table creates a fresh record table on db and returns its Store.
func table(t *testing.T, db *gorm.DB) (*record.Store, string) {
	t.Helper()
	name := testsvc.Name("admin_")
	st, err := record.New(db, &record.Options{Table: name})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	testsvc.DropTable(t, db, name)
	return st, name
}

// clocked returns a Guard (one-minute lease, no Locker) and an Admin on a fresh record table of db,
// both on one test clock.
// cleanRedis returns the test Redis and a key prefix of the test's own, its keys deleted when t ends.
func cleanRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	rdb := testsvc.Redis(t)
	prefix := testsvc.Name("admin-test-") + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	return rdb, prefix
}

func clocked(t *testing.T, db *gorm.DB) (*idemkit.Guard, *admin.Admin, *idemtest.Clock) {
	t.Helper()
	st, tbl := table(t, db)
	clock := idemtest.NewClock()
	g, err := idemkit.New(st, &idemkit.Options{Lease: time.Minute, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admin.New(db, &admin.Options{Table: tbl, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return g, adm, clock
}

// TestSweepPlanMatchesSweeper: on records in every combination of state, lease, expiry and gid,
// what PlanSweep says a sweeper pass deletes, recovers and leaves to a reconciler is exactly what
// record.Store's DeleteExpired, RecoverStale and Pending do and list.
func TestSweepPlanMatchesSweeper(t *testing.T) {
	for name, open := range dialects {
		t.Run(name, func(t *testing.T) {
			db := open(t, nil)
			st, tbl := table(t, db)
			clock := idemtest.NewClock()
			now := clock.Now()
			ctx := context.Background()
			times := []time.Time{{}, now.Add(-time.Hour), now, now.Add(time.Hour)} // zero = none
			n := 0
			for _, status := range []idemkit.Status{idemkit.StatusProcessing, idemkit.StatusSucceeded, idemkit.StatusFailed, idemkit.StatusRejected} {
				for _, lease := range times[1:] {
					for _, exp := range times {
						for _, gid := range []string{"", "g"} {
							n++
							rec := &idemkit.Record{Scope: "s", Key: fmt.Sprintf("k%03d", n), Status: status, Fence: 1, Owner: "o",
								GID: gid, LeaseUntil: lease, ExpiresAt: exp, CreatedAt: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-2 * time.Hour)}
							if err := st.Insert(ctx, rec); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
			}
			adm, err := admin.New(db, &admin.Options{Table: tbl, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			plan, err := adm.PlanSweep(ctx, 1000)
			if err != nil {
				t.Fatal(err)
			}
			keys := func(es []*admin.Entry) []string {
				var out []string
				for _, e := range es {
					out = append(out, e.Key)
				}
				slices.Sort(out)
				return out
			}
			if plan.ExpiredTotal != int64(len(plan.Expired)) || plan.StaleTotal != int64(len(plan.Stale)) || plan.PendingTotal != int64(len(plan.Pending)) {
				t.Fatalf("totals %d %d %d, lists %d %d %d", plan.ExpiredTotal, plan.StaleTotal, plan.PendingTotal, len(plan.Expired), len(plan.Stale), len(plan.Pending))
			}
			if len(plan.Expired) == 0 || len(plan.Stale) == 0 || len(plan.Pending) == 0 {
				t.Fatalf("the plan is empty somewhere: %d %d %d", len(plan.Expired), len(plan.Stale), len(plan.Pending))
			}
			pending, err := st.Pending(ctx, idemkit.PendingQuery{Scopes: []string{"s"}, Now: now, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			var pendingKeys []string
			for _, r := range pending {
				pendingKeys = append(pendingKeys, r.Key)
			}
			slices.Sort(pendingKeys)
			if got := keys(plan.Pending); !slices.Equal(got, pendingKeys) {
				t.Fatalf("plan's pending %q, Store.Pending %q", got, pendingKeys)
			}

			before, err := adm.List(ctx, admin.Filter{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			deleted, err := st.DeleteExpired(ctx, now, 1000)
			if err != nil {
				t.Fatal(err)
			}
			recovered, err := st.RecoverStale(ctx, now, 1000)
			if err != nil {
				t.Fatal(err)
			}
			after, err := adm.List(ctx, admin.Filter{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if deleted != len(plan.Expired) || recovered != len(plan.Stale) {
				t.Fatalf("the sweeper deleted %d and recovered %d; the plan said %d and %d", deleted, recovered, len(plan.Expired), len(plan.Stale))
			}
			left := map[string]*admin.Entry{}
			for _, e := range after {
				left[e.Key] = e
			}
			var gone, failed []string
			for _, e := range before {
				a, ok := left[e.Key]
				switch {
				case !ok:
					gone = append(gone, e.Key)
				case a.Fence == e.Fence+1 && a.Status == idemkit.StatusFailed && a.Error == record.RecoveredError:
					failed = append(failed, e.Key)
				}
			}
			slices.Sort(gone)
			slices.Sort(failed)
			if !slices.Equal(gone, keys(plan.Expired)) || !slices.Equal(failed, keys(plan.Stale)) {
				t.Fatalf("deleted %q, plan %q; recovered %q, plan %q", gone, keys(plan.Expired), failed, keys(plan.Stale))
			}
		})
	}
}

// TestRedisStateFollowsLocker: what Admin.Redis reads is what the real lock.Locker wrote — the lock
// and its holder's token, the cached result — and the one-key layout is read the same way.
func TestRedisStateFollowsLocker(t *testing.T) {
	db := testsvc.SQLite(t, nil)
	rdb, prefix := cleanRedis(t)
	_, tbl := table(t, db)
	adm, err := admin.New(db, &admin.Options{Table: tbl, Redis: rdb, RedisPrefix: prefix, Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lk := lock.New(rdb, &lock.Options{Prefix: prefix})
	ad, err := adm.Address("POST /x", "k")
	if err != nil {
		t.Fatal(err)
	}
	state := func() *admin.RedisState {
		t.Helper()
		s, err := adm.Redis(ctx, ad.Scope, ad.Key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := state(); s.Locked || s.Cached {
		t.Fatalf("empty Redis: %+v", s)
	}
	if _, err := lk.Acquire(ctx, ad.LockKey, "tok-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if s := state(); !s.Locked || s.LockToken != "tok-1" || s.LockTTL <= 0 || s.LockTTL > time.Minute || s.Cached {
		t.Fatalf("after Acquire: %+v", s)
	}
	if err := lk.Release(ctx, ad.LockKey, "tok-1", []byte("result!"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if s := state(); s.Locked || !s.Cached || s.CachedSize < int64(len("result!")) || s.CacheTTL <= 0 {
		t.Fatalf("after Release with a result: %+v", s)
	}

	// The one-key layout as lock.Locker documents it: a lock value "L<deadline>:<token>" (deadline in
	// Unix ms), or a cached result.
	other, err := adm.Address("POST /x", "k2")
	if err != nil {
		t.Fatal(err)
	}
	single := prefix + "{" + other.LockKey + "}"
	if err := rdb.Set(ctx, single, "L1893456000000:tok-2", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if s, err := adm.Redis(ctx, other.Scope, other.Key); err != nil || !s.Locked || s.LockToken != "tok-2" || s.Cached {
		t.Fatalf("one-key lock: %+v %v", s, err)
	}
	if err := rdb.Set(ctx, single, "\x01\x01cached", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if s, err := adm.Redis(ctx, other.Scope, other.Key); err != nil || s.Locked || !s.Cached || s.CachedSize != 8 {
		t.Fatalf("one-key cached result: %+v %v", s, err)
	}
}

// TestNewRefusesBadOptions: a bad table name, namespace or Redis prefix fails New.
func TestNewRefusesBadOptions(t *testing.T) {
	db := testsvc.SQLite(t, nil)
	for _, o := range []admin.Options{{Table: "a-b"}, {Namespace: "a/b"}, {RedisPrefix: "x{"}, {Namespace: "a\x00"}} {
		if _, err := admin.New(db, &o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
	adm, err := admin.New(db, &admin.Options{Table: "missing_table"})
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.Check(context.Background()); !errors.Is(err, admin.ErrNoTable) {
		t.Fatalf("Check on a missing table: %v", err)
	}
}

// TestRedisCleanupFollowsLocker: Release deletes the stalled holder's lock (a retry runs at once) and
// Purge the cached result (the key runs again), both through the real lock.Locker's key; neither
// touches the lock of another attempt that is running.
func TestRedisCleanupFollowsLocker(t *testing.T) {
	db := testsvc.SQLite(t, nil)
	rdb, prefix := cleanRedis(t)
	st, tbl := table(t, db)
	clock := idemtest.NewClock()
	lk := lock.New(rdb, &lock.Options{Prefix: prefix})
	g, err := idemkit.New(st, &idemkit.Options{Locker: lk, Lease: time.Minute, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admin.New(db, &admin.Options{Table: tbl, Redis: rdb, RedisPrefix: prefix, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	state := func(key string) *admin.RedisState {
		t.Helper()
		ad, err := adm.Address("s", key)
		if err != nil {
			t.Fatal(err)
		}
		s, err := adm.Redis(ctx, ad.Scope, ad.Key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	get := func(key string) *idemkit.Record {
		t.Helper()
		rec, err := adm.Get(ctx, "s", key)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}

	// A stalled holder: its lease runs out by the record's clock, its Redis lock is still held.
	stalled, _, err := g.Begin(ctx, idemkit.Call{Scope: "s", Key: "stuck"})
	if err != nil || stalled == nil {
		t.Fatalf("Begin: %v", err)
	}
	clock.Advance(2 * time.Minute)
	if s := state("stuck"); !s.Locked || s.LockToken != stalled.Record().Owner {
		t.Fatalf("the stalled holder's lock: %+v", s)
	}
	if _, err := adm.Release(ctx, get("stuck"), admin.ReleaseOptions{By: "test"}); err != nil {
		t.Fatal(err)
	}
	if s := state("stuck"); s.Locked || s.Cached {
		t.Fatalf("after Release: %+v; want the lock gone", s)
	}
	ran := false
	if res, err := g.Do(ctx, idemkit.Call{Scope: "s", Key: "stuck"}, func(context.Context) ([]byte, error) { ran = true; return []byte("r"), nil }); err != nil || !ran || res.Fence != 3 {
		t.Fatalf("retry after Release: %+v %v ran=%v", res, err, ran)
	}

	// Purge drops the cached result: the key runs again.
	if s := state("stuck"); !s.Cached {
		t.Fatalf("the retry's result is not cached: %+v", s)
	}
	if err := adm.Purge(ctx, get("stuck"), admin.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if s := state("stuck"); s.Locked || s.Cached {
		t.Fatalf("after Purge: %+v; want nothing", s)
	}
	ran = false
	if _, err := g.Do(ctx, idemkit.Call{Scope: "s", Key: "stuck"}, func(context.Context) ([]byte, error) { ran = true; return []byte("r2"), nil }); err != nil || !ran {
		t.Fatalf("after Purge the key did not run again: %v", err)
	}

	// Another attempt's lock stays through a forced Release and a Purge of the record it replaces.
	old, _, err := g.Begin(ctx, idemkit.Call{Scope: "s", Key: "busy"})
	if err != nil || old == nil {
		t.Fatalf("Begin busy: %v", err)
	}
	ad, err := adm.Address("s", "busy")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(ctx, ad.LockKey, old.Record().Owner, nil, 0); err != nil {
		t.Fatal(err)
	}
	if v, err := lk.Acquire(ctx, ad.LockKey, "newcomer", time.Minute); err != nil || v != nil {
		t.Fatalf("newcomer's Acquire: %q %v", v, err)
	}
	rec := get("busy")
	if _, err := adm.Release(ctx, rec, admin.ReleaseOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if s := state("busy"); !s.Locked || s.LockToken != "newcomer" {
		t.Fatalf("Release took another attempt's lock: %+v", s)
	}
	if err := adm.Purge(ctx, get("busy"), admin.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if s := state("busy"); !s.Locked || s.LockToken != "newcomer" {
		t.Fatalf("Purge took another attempt's lock: %+v", s)
	}
}

// TestReleaseAndPurgeSeeARenewal: a claim read while its lease had run out, then renewed by its
// holder (a watchdog's Extend: the lease moves, the version does not) before the operator's release
// or purge is written, is refused as live, and its holder finishes it. Before, both checked the
// lease of the record as read and ended a live claim.
func TestReleaseAndPurgeSeeARenewal(t *testing.T) {
	for name, open := range dialects {
		t.Run(name, func(t *testing.T) {
			g, adm, clock := clocked(t, open(t, nil))
			ctx := context.Background()
			for _, op := range []string{"release", "purge"} {
				call := idemkit.Call{Scope: "s", Key: op}
				claim, _, err := g.Begin(ctx, call)
				if err != nil || claim == nil {
					t.Fatalf("Begin: %v", err)
				}
				clock.Advance(2 * time.Minute) // the lease ran out: the operator reads a stuck claim
				rec, err := adm.Get(ctx, call.Scope, call.Key)
				if err != nil {
					t.Fatal(err)
				}
				if err := adm.CanRelease(rec, admin.ReleaseOptions{}); err != nil {
					t.Fatalf("the claim as read is not releasable: %v", err)
				}
				if err := claim.Extend(ctx); err != nil { // the holder was alive after all
					t.Fatal(err)
				}
				if op == "release" {
					_, err = adm.Release(ctx, rec, admin.ReleaseOptions{By: "test"})
				} else {
					err = adm.Purge(ctx, rec, admin.PurgeOptions{})
				}
				if !errors.Is(err, admin.ErrRefused) {
					t.Fatalf("%s of a claim renewed since it was read: %v, want ErrRefused", op, err)
				}
				if res, err := claim.Finish(ctx, []byte("done"), nil); err != nil || string(res.Value) != "done" {
					t.Fatalf("%s: the holder's finish: %+v, %v", op, res, err)
				}
			}
		})
	}
}

// TestPurgeKeepsARunningMarkLock: Mark mode records SUCCEEDED when it claims and runs its function
// under the Redis lock. A purge of that record is refused (TestPurgeRefusesARunningMark); a forced one
// drops the record and any cached result, but not the running owner's lock: duplicates stay in flight
// until the function ends, never run beside it.
func TestPurgeKeepsARunningMarkLock(t *testing.T) {
	db := testsvc.SQLite(t, nil)
	rdb, prefix := cleanRedis(t)
	st, tbl := table(t, db)
	g, err := idemkit.New(st, &idemkit.Options{Locker: lock.New(rdb, &lock.Options{Prefix: prefix}), Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admin.New(db, &admin.Options{Table: tbl, Redis: rdb, RedisPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := idemkit.Call{Scope: "m", Key: "k"}
	finish := markRunning(t, g, call)
	rec, err := adm.Get(ctx, call.Scope, call.Key)
	if err != nil || rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("Mark's record while it runs: %+v, %v", rec, err)
	}
	if err := adm.Purge(ctx, rec, admin.PurgeOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	ran := false
	err = g.Mark(ctx, call, func(context.Context) error { ran = true; return nil })
	if ran || !errors.Is(err, idemkit.ErrInFlight) {
		t.Fatalf("a duplicate after the purge, while the first runs: ran=%v, %v; want ErrInFlight", ran, err)
	}
	finish()
}

// markRunning starts g.Mark on call with a function that runs until finish is called; finish waits
// for Mark and fails t on its error.
func markRunning(t *testing.T, g *idemkit.Guard, call idemkit.Call) (finish func()) {
	t.Helper()
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- g.Mark(context.Background(), call, func(context.Context) error { close(inside); <-release; return nil })
	}()
	<-inside
	return func() {
		t.Helper()
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestReleaseChecksBy: a release reason the error column cannot hold, or that would garble listings,
// is refused before anything is written (MariaDB refused invalid UTF-8 with a raw driver error).
func TestReleaseChecksBy(t *testing.T) {
	g, adm, clock := clocked(t, testsvc.MySQL(t, nil))
	ctx := context.Background()
	if _, _, err := g.Begin(ctx, idemkit.Call{Scope: "s", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	rec, err := adm.Get(ctx, "s", "k")
	if err != nil {
		t.Fatal(err)
	}
	for _, by := range []string{"bad \xff", "a\nb", "nul\x00", string(make([]byte, admin.MaxBy+1))} {
		if _, err := adm.Release(ctx, rec, admin.ReleaseOptions{By: by}); err == nil || errors.Is(err, admin.ErrRefused) {
			t.Errorf("By %q: %v, want a reason error", by, err)
		}
	}
	if got, err := adm.Get(ctx, "s", "k"); err != nil || got.Version() != rec.Version() {
		t.Fatalf("a refused reason changed the record: %+v, %v", got, err)
	}
	if _, err := adm.Release(ctx, rec, admin.ReleaseOptions{By: "ops: stuck since the deploy"}); err != nil {
		t.Fatal(err)
	}
}
