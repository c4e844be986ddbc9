package sweep_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/sweep"
)

var (
	_ sweep.ClaimRecoverer = (*record.Store)(nil)
	_ sweep.ClaimRecoverer = (*memory.Store)(nil)
)

// TestRecoveredClaimsLockIsReleased: with a LockTTL longer than the Lease, a claim whose holder died
// keeps its Redis lock after the sweeper recovered its record, and every retry of the key answered in
// flight until the lock expired (nothing named its holder any more: the recovery cleared the owner).
// The sweeper's recover_stale now releases that lock by the holder's token, so the retry runs; a lock
// another attempt holds on a recovered key stays.
//
// The memory Store and Locker, the backends programs unit-test with, behave the same: the memory Store
// did not report the claims it recovered (no RecoverStaleClaims), so RecordTasksWithLocker fell back to
// lock-blind recovery there, and a test of the retry after a sweep answered in flight where
// production runs it.
func TestRecoveredClaimsLockIsReleased(t *testing.T) {
	redisLocker := func(t testing.TB, _ *idemtest.Clock) idemkit.Locker {
		return lock.New(testsvc.Redis(t), &lock.Options{Prefix: testsvc.Name("idemkit-test-") + ":"})
	}
	for _, b := range []struct {
		name   string
		open   func(testing.TB) sweepStore
		locker func(testing.TB, *idemtest.Clock) idemkit.Locker
	}{{"MariaDB", func(t testing.TB) sweepStore { return recordStore(t, testsvc.MySQL) }, redisLocker},
		{"PostgreSQL", func(t testing.TB) sweepStore { return recordStore(t, testsvc.Postgres) }, redisLocker},
		{"Memory", func(testing.TB) sweepStore { return memory.NewStore() }, func(_ testing.TB, clk *idemtest.Clock) idemkit.Locker {
			return memory.NewLocker(&memory.LockerOptions{Now: clk.Now})
		}}} {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			store := b.open(t)
			clk := idemtest.NewClock()
			lk := b.locker(t, clk)
			g, err := idemkit.New(store, &idemkit.Options{Locker: lk, Lease: time.Second, LockTTL: time.Hour, TTL: 24 * time.Hour, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			// Two holders that died mid-request. The lock of the second expired and another attempt
			// (of another process, say) took it since.
			for _, k := range []string{"dead", "relocked"} {
				if _, _, err := g.Begin(ctx, idemkit.Call{Scope: "s", Key: k}); err != nil {
					t.Fatal(err)
				}
			}
			other := idemkit.LockKey("s", "relocked")
			rec, err := store.Get(ctx, "s", "relocked")
			if err != nil {
				t.Fatal(err)
			}
			if err := lk.Release(ctx, other, rec.Owner, nil, 0); err != nil { // as if it expired
				t.Fatal(err)
			}
			if _, err := lk.Acquire(ctx, other, "another attempt", time.Hour); err != nil {
				t.Fatal(err)
			}

			clk.Advance(2 * time.Second)
			sw, err := sweep.New(&sweep.Options{Now: clk.Now}, sweep.RecordTasksWithLocker(store, lk)...)
			if err != nil {
				t.Fatal(err)
			}
			stats, err := sw.RunOnce(ctx)
			if err != nil || stats["recover_stale"] != 2 {
				t.Fatalf("pass: %v %v, want 2 recovered", stats, err)
			}
			ran := false
			if _, err := g.Do(ctx, idemkit.Call{Scope: "s", Key: "dead"}, func(context.Context) ([]byte, error) {
				ran = true
				return []byte("v"), nil
			}); err != nil || !ran {
				t.Fatalf("retry of the recovered claim: ran %v, %v", ran, err)
			}
			if _, err := lk.Acquire(ctx, other, "probe", time.Second); !errors.Is(err, idemkit.ErrLocked) {
				t.Fatalf("the other attempt's lock on a recovered key: %v, want it still held (ErrLocked)", err)
			}
		})
	}
}

// sweepStore is a Store the sweeper cleans.
type sweepStore interface {
	idemkit.Store
	sweep.Target
}

// recordStore returns a record.Store over a fresh table of the database open opens.
func recordStore(t testing.TB, open func(testing.TB, *gorm.Config) *gorm.DB) *record.Store {
	t.Helper()
	db := open(t, nil)
	table := testsvc.Name("t_sweep_")
	store, err := record.New(db, &record.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	testsvc.DropTable(t, db, table)
	if err := store.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return store
}

// hungLocker is a Locker whose Release fails as a Redis that stopped answering does: each call
// waits for its client's timeout (here delay), then fails.
type hungLocker struct {
	idemkit.Locker
	delay    time.Duration
	releases atomic.Int32
}

func (l *hungLocker) Release(ctx context.Context, key, token string, result []byte, cacheTTL time.Duration) error {
	l.releases.Add(1)
	time.Sleep(l.delay)
	return errors.New("lock: releasing: i/o timeout")
}

// TestRecoveryIsNotHeldUpByAHungLocker: when the Locker stopped answering (a Redis that hangs: every
// command waits for its client's timeout, 5s with go-redis's defaults), recover_stale waited for
// each recovered claim's lock release in turn — measured against a listener that never answers,
// 5s a claim: a batch of 500 stuck claims held the pass (and every later batch and pass) for 42
// minutes, while the records themselves were recovered at once. It now stops releasing after 3
// failures in a row, as the reconcilers stop asking a manager that does not answer: the rest of the
// batch's locks expire by themselves, the task reports the error, and the next pass goes on.
func TestRecoveryIsNotHeldUpByAHungLocker(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	clk := idemtest.NewClock()
	g, err := idemkit.New(store, &idemkit.Options{Lease: time.Second, TTL: time.Hour, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	const claims = 20
	for i := range claims {
		if _, _, err := g.Begin(ctx, idemkit.Call{Scope: "s", Key: fmt.Sprint("dead-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Second)
	lk := &hungLocker{Locker: memory.NewLocker(nil), delay: 10 * time.Millisecond}
	sw, err := sweep.New(&sweep.Options{Now: clk.Now}, sweep.RecordTasksWithLocker(store, lk)...)
	if err != nil {
		t.Fatal(err)
	}
	stats, err := sw.RunOnce(ctx)
	if stats["recover_stale"] != claims || err == nil {
		t.Fatalf("pass: %v %v, want %d recovered and the release failures reported", stats, err, claims)
	}
	if n := lk.releases.Load(); n > 3 {
		t.Fatalf("%d releases tried on a Locker that does not answer, want at most 3", n)
	}
	if !strings.Contains(err.Error(), "expire by themselves") {
		t.Fatalf("error %q does not say the remaining locks expire by themselves", err)
	}
}
