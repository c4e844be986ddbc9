package lock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
)

// TestRoundTripBudget counts the commands a Guard sends through the Redis Locker: a replay served
// from the cache is exactly one native SET ... NX ... GET, a new key in Execute mode two native SETs
// (the lock, then the result in its place), no Lua script either way — even on a fresh private server
// that has never seen the scripts.
func TestRoundTripBudget(t *testing.T) {
	_, rdb := privateRedis(t)
	counter := &cmdCounter{}
	rdb.AddHook(counter)
	ctx := testCtx(t)
	if err := rdb.Ping(ctx).Err(); err != nil { // open the connection outside the counts
		t.Fatal(err)
	}
	obs := &events{}
	g := newGuard(t, memory.NewStore(), &idemkit.Options{Locker: lock.New(rdb, nil), Observer: obs})
	do := func(key string) (idemkit.Result, []string) {
		t.Helper()
		counter.take()
		res, err := g.Do(ctx, idemkit.Call{Scope: "POST /orders", Key: key}, func(context.Context) ([]byte, error) {
			return []byte("created " + key), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return res, counter.take()
	}

	// Cold: a new key on a server that has never seen the scripts: the native commands need none.
	_, cold := do("cold")
	t.Logf("new key with the script cache empty: %d commands %v", len(cold), cold)
	if len(cold) > 2 {
		t.Errorf("new key with the script cache empty sent %d commands %v; want at most 2", len(cold), cold)
	}

	// Warm: the scripts are cached now.
	res, cmds := do("new")
	t.Logf("new key: %d commands %v", len(cmds), cmds)
	if res.Replayed || !slices.Equal(cmds, []string{"set", "set"}) {
		t.Errorf("new key: Replayed=%v, commands %v; want a run and two native SETs (lock, then result), no script", res.Replayed, cmds)
	}
	res, cmds = do("new")
	t.Logf("cached replay: %d commands %v", len(cmds), cmds)
	if !res.Replayed || !slices.Equal(cmds, []string{"set"}) {
		t.Errorf("cached replay: Replayed=%v, commands %v; want a replay and exactly one native SET ... GET", res.Replayed, cmds)
	}
	if evs := obs.take(); len(evs) != 3 || !evs[2].Cached {
		t.Errorf("the replay was not served from the cache: %+v", evs)
	}
}

// TestWatchdog is issue 2's "watchdog keeps a long function's lock and lease alive": with a lock TTL
// and lease of a few hundred milliseconds, a function running about three times as long keeps its
// claim when the watchdog is on (duplicates are in flight throughout, its result is stored), and
// loses it when the watchdog is off (a taker runs, the stale finish gets ErrFenced, the taker wins).
// Sleeps only let time pass; no duration is asserted, and channels order the steps.
func TestWatchdog(t *testing.T) {
	// The watchdog renews every ttl/3: the claim is lost only if the process stalls past 2/3 of ttl
	// (1.3 s, not 333 ms — a -race run on a busy 2-core machine can stall that long).
	const ttl = 2 * time.Second
	var b *bundle
	setupGuards := func(t *testing.T, watchdog bool) (redisGuard, storeGuard *idemkit.Guard) {
		var l *lock.Locker
		l, b = setup(t)
		store := memory.NewStore()
		opts := idemkit.Options{Locker: l, Lease: ttl, LockTTL: ttl, Watchdog: watchdog}
		redisGuard = newGuard(t, store, &opts)
		// storeGuard has no Locker: its calls see only the record's lease.
		storeGuard = newGuard(t, store, &idemkit.Options{Lease: ttl})
		return redisGuard, storeGuard
	}
	call := idemkit.Call{Scope: "watchdog", Key: "long"}
	mustNotRun := func(context.Context) ([]byte, error) { return nil, errors.New("duplicate ran") }

	t.Run("on", func(t *testing.T) {
		ctx := testCtx(t)
		redisGuard, storeGuard := setupGuards(t, true)
		probe, probed := make(chan int), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			res, err := redisGuard.Do(ctx, call, func(ctx context.Context) ([]byte, error) {
				for i := range 3 {
					time.Sleep(ttl) // one full TTL each time: only renewal keeps the claim
					probe <- i
					<-probed
				}
				return []byte("mine"), context.Cause(ctx)
			})
			if err == nil && string(res.Value) != "mine" {
				err = fmt.Errorf("result %q", res.Value)
			}
			done <- err
		}()
		for i := range 3 {
			<-probe
			for name, g := range map[string]*idemkit.Guard{"lock": redisGuard, "lease": storeGuard} {
				if _, err := g.Do(ctx, call, mustNotRun); !errors.Is(err, idemkit.ErrInFlight) {
					t.Errorf("probe %d through the %s: %v; want ErrInFlight", i, name, err)
				}
			}
			// The in-flight answer came from Redis: the holder's lock is still there (a probe that
			// had taken an expired lock would have released it).
			if v, err := b.rdb.Get(ctx, b.prefix+"{"+lockKeyOf(call)+"}").Result(); err != nil || !strings.HasPrefix(v, "L") {
				t.Errorf("probe %d: key holds %q, %v; want the holder's lock", i, v, err)
			}
			probed <- struct{}{}
		}
		if err := <-done; err != nil {
			t.Fatalf("long function with the watchdog: %v", err)
		}
		res, err := storeGuard.Do(ctx, call, mustNotRun)
		if err != nil || !res.Replayed || string(res.Value) != "mine" {
			t.Fatalf("after the run: %+v, %v; want the replayed \"mine\"", res, err)
		}
	})

	t.Run("off", func(t *testing.T) {
		ctx := testCtx(t)
		redisGuard, _ := setupGuards(t, false)
		inside, finish := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := redisGuard.Do(ctx, call, func(context.Context) ([]byte, error) {
				close(inside)
				<-finish
				return []byte("stale"), nil
			})
			done <- err
		}()
		<-inside
		// Once lock and lease ran out, a duplicate takes over and finishes.
		deadline := time.Now().Add(10 * time.Second)
		for {
			res, err := redisGuard.Do(ctx, call, func(context.Context) ([]byte, error) { return []byte("taker"), nil })
			if err == nil {
				if res.Replayed || string(res.Value) != "taker" || res.Fence != 2 {
					t.Fatalf("taker got %+v; want its own run with fence 2", res)
				}
				break
			}
			if !errors.Is(err, idemkit.ErrInFlight) || time.Now().After(deadline) {
				t.Fatalf("taker: %v", err)
			}
			time.Sleep(ttl / 3)
		}
		close(finish)
		if err := <-done; !errors.Is(err, idemkit.ErrFenced) {
			t.Fatalf("stale holder's finish = %v; want ErrFenced", err)
		}
		res, err := redisGuard.Do(ctx, call, mustNotRun)
		if err != nil || !res.Replayed || string(res.Value) != "taker" {
			t.Fatalf("after both: %+v, %v; want the taker's result replayed", res, err)
		}
	})
}

// lockKeyOf is the Locker key a Guard without namespace uses for c (scope and key stored as they are).
func lockKeyOf(c idemkit.Call) string {
	return strconv.Itoa(len(c.Scope)) + ":" + c.Scope + ":" + c.Key
}
