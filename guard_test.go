package idemkit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
)

var ctxb = context.Background()

// flakyLocker fails every call while down is set, like a Redis that went away.
type flakyLocker struct {
	idemkit.Locker
	down  atomic.Bool
	calls atomic.Int32
}

var errRedisDown = errors.New("dial tcp 127.0.0.1:6379: connection refused")

func (f *flakyLocker) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return nil, errRedisDown
	}
	return f.Locker.Acquire(ctx, key, token, ttl)
}

func (f *flakyLocker) Release(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	f.calls.Add(1)
	if f.down.Load() {
		return errRedisDown
	}
	return f.Locker.Release(ctx, key, token, result, ttl)
}

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []idemkit.Event
}

func (r *recorder) Start(ctx context.Context, mode idemkit.Mode, scope string) (context.Context, func(*idemkit.Event)) {
	return ctx, func(ev *idemkit.Event) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events = append(r.events, *ev)
	}
}

func (r *recorder) last(t *testing.T) idemkit.Event {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		t.Fatal("no events")
	}
	return r.events[len(r.events)-1]
}

type bundle struct {
	g      *idemkit.Guard
	store  *memory.Store
	locker *flakyLocker
	obs    *recorder
	clock  *idemtest.Clock
}

func setup(t *testing.T, mod func(*idemkit.Options)) *bundle {
	t.Helper()
	b := &bundle{store: memory.NewStore(), obs: &recorder{}, clock: idemtest.NewClock()}
	b.locker = &flakyLocker{Locker: memory.NewLocker(&memory.LockerOptions{Now: b.clock.Now})}
	o := &idemkit.Options{Locker: b.locker, Observer: b.obs, Now: b.clock.Now, Lease: 10 * time.Second}
	if mod != nil {
		mod(o)
	}
	g, err := idemkit.New(b.store, o)
	if err != nil {
		t.Fatal(err)
	}
	b.g = g
	return b
}

func ok(v string) idemkit.Func {
	return func(context.Context) ([]byte, error) { return []byte(v), nil }
}

func TestCachedReplay(t *testing.T) {
	b := setup(t, nil)
	call := idemkit.Call{Scope: "s", Key: "k", Fingerprint: "fp"}
	if _, err := b.g.Do(ctxb, call, ok("v1")); err != nil {
		t.Fatal(err)
	}
	res, err := b.g.Do(ctxb, call, ok("v2"))
	if err != nil || !res.Replayed || string(res.Value) != "v1" {
		t.Fatalf("replay: %+v %v", res, err)
	}
	if ev := b.obs.last(t); ev.Outcome != idemkit.OutcomeReplayed || !ev.Cached || ev.Status != idemkit.StatusSucceeded {
		t.Fatalf("replay event %+v, want a cached replay", ev)
	}
	// The cache checks the fingerprint too.
	call.Fingerprint = "other"
	if _, err := b.g.Do(ctxb, call, ok("v3")); !errors.Is(err, idemkit.ErrPayloadMismatch) {
		t.Fatalf("mismatch through the cache: %v", err)
	}
	// Mark mode on a cached key is a duplicate.
	if err := b.g.Mark(ctxb, idemkit.Call{Scope: "s", Key: "k"}, func(context.Context) error { return nil }); !errors.Is(err, idemkit.ErrDuplicate) {
		t.Fatalf("mark on a cached key: %v", err)
	}
}

func TestRejectedIsCachedAndReplayed(t *testing.T) {
	b := setup(t, nil)
	call := idemkit.Call{Scope: "s", Key: "k"}
	_, err := b.g.Do(ctxb, call, func(context.Context) ([]byte, error) {
		return nil, idemkit.Permanent(errors.New("card declined"))
	})
	if !idemkit.IsPermanent(err) {
		t.Fatal(err)
	}
	_, err = b.g.Do(ctxb, call, ok("never"))
	var rej *idemkit.RejectedError
	if !errors.As(err, &rej) || rej.Message != "card declined" || !b.obs.last(t).Cached {
		t.Fatalf("cached rejection: %v, event %+v", err, b.obs.last(t))
	}
}

func TestStoreReplayFillsCache(t *testing.T) {
	b := setup(t, func(o *idemkit.Options) { o.CacheTTL = -1 })
	call := idemkit.Call{Scope: "s", Key: "k"}
	if _, err := b.g.Do(ctxb, call, ok("v")); err != nil {
		t.Fatal(err)
	}
	// Cache disabled: replays come from the store.
	if _, err := b.g.Do(ctxb, call, ok("v")); err != nil || b.obs.last(t).Cached {
		t.Fatalf("replay with the cache disabled: %v %+v", err, b.obs.last(t))
	}
	// A second guard with the cache on fills it from the store on its first replay.
	g2, err := idemkit.New(b.store, &idemkit.Options{Locker: b.locker, Observer: b.obs, Now: b.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	for i, cached := range []bool{false, true} {
		res, err := g2.Do(ctxb, call, ok("other"))
		if err != nil || !res.Replayed || string(res.Value) != "v" || b.obs.last(t).Cached != cached {
			t.Fatalf("replay %d: %+v %v cached=%v", i, res, err, b.obs.last(t).Cached)
		}
	}
}

func TestCacheNeverOutlivesRecord(t *testing.T) {
	b := setup(t, func(o *idemkit.Options) { o.TTL = time.Minute; o.CacheTTL = time.Hour })
	call := idemkit.Call{Scope: "s", Key: "k"}
	if _, err := b.g.Do(ctxb, call, ok("v1")); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(time.Minute)
	res, err := b.g.Do(ctxb, call, ok("v2"))
	if err != nil || res.Replayed || string(res.Value) != "v2" {
		t.Fatalf("after the record expired: %+v %v (a stale cache entry was replayed)", res, err)
	}
}

func TestLockerDown(t *testing.T) {
	t.Run("FailClosed", func(t *testing.T) {
		b := setup(t, nil)
		b.locker.down.Store(true)
		runs := 0
		_, err := b.g.Do(ctxb, idemkit.Call{Scope: "s", Key: "k"}, func(context.Context) ([]byte, error) { runs++; return nil, nil })
		if !errors.Is(err, idemkit.ErrLockUnavailable) || !strings.Contains(err.Error(), "connection refused") || runs != 0 {
			t.Fatalf("got %v after %d runs, want ErrLockUnavailable and no run", err, runs)
		}
		if b.store.Len() != 0 {
			t.Fatal("a record was written although the call failed")
		}
		if ev := b.obs.last(t); ev.Outcome != idemkit.OutcomeUnavailable {
			t.Fatalf("event %+v", ev)
		}
	})
	t.Run("FailOpen", func(t *testing.T) {
		b := setup(t, func(o *idemkit.Options) { o.FailOpen = true })
		b.locker.down.Store(true)
		var runs atomic.Int32
		fn := func(context.Context) ([]byte, error) {
			runs.Add(1)
			time.Sleep(time.Millisecond)
			return []byte("v"), nil
		}
		var wg sync.WaitGroup
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := b.g.Do(ctxb, idemkit.Call{Scope: "s", Key: "k"}, fn)
				if err != nil && !errors.Is(err, idemkit.ErrInFlight) || err == nil && string(res.Value) != "v" {
					t.Errorf("%+v %v", res, err)
				}
			}()
		}
		wg.Wait()
		if runs.Load() != 1 {
			t.Fatalf("ran %d times with the lock down, want 1 (the store decides)", runs.Load())
		}
		if !b.obs.last(t).FailOpen {
			t.Fatalf("event %+v does not report fail-open", b.obs.last(t))
		}
	})
}

func TestStoreDown(t *testing.T) {
	store := &brokenStore{Store: memory.NewStore(), err: errors.New("dial tcp 127.0.0.1:3306: connection refused")}
	g, err := idemkit.New(store, &idemkit.Options{Locker: memory.NewLocker(nil)})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	_, err = g.Do(ctxb, idemkit.Call{Scope: "s", Key: "k"}, func(context.Context) ([]byte, error) { runs++; return nil, nil })
	if !errors.Is(err, idemkit.ErrStoreUnavailable) || runs != 0 {
		t.Fatalf("got %v after %d runs, want ErrStoreUnavailable and no run", err, runs)
	}
	// The lock was released: once the store is back, the key works.
	store.err = nil
	if _, err := g.Do(ctxb, idemkit.Call{Scope: "s", Key: "k"}, ok("v")); err != nil {
		t.Fatal(err)
	}
}

type brokenStore struct {
	*memory.Store
	err error
}

func (b *brokenStore) Insert(ctx context.Context, r *idemkit.Record) error {
	if b.err != nil {
		return b.err
	}
	return b.Store.Insert(ctx, r)
}

func TestFinishSurvivesCancellation(t *testing.T) {
	b := setup(t, nil)
	ctx, cancel := context.WithCancel(ctxb)
	call := idemkit.Call{Scope: "s", Key: "k"}
	_, err := b.g.Do(ctx, call, func(context.Context) ([]byte, error) {
		cancel() // the client went away while we worked
		return []byte("v"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := b.g.Get(ctxb, "s", "k")
	if err != nil || rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("record after a cancelled request: %+v %v", rec, err)
	}
	res, err := b.g.Do(ctxb, call, ok("again"))
	if err != nil || !res.Replayed {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestWatchdogCancelsWhenLockLost(t *testing.T) {
	store := memory.NewStore()
	locker := memory.NewLocker(nil)
	g, err := idemkit.New(store, &idemkit.Options{Locker: locker, Lease: 150 * time.Millisecond, Watchdog: true})
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "s", Key: "k"}
	started := make(chan struct{})
	var cause error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err = g.Do(ctxb, call, func(ctx context.Context) ([]byte, error) {
			close(started)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return nil, ctx.Err()
		})
	}()
	<-started
	// Steal the claim from under the watchdog: a newer attempt takes the record over.
	rec, gerr := g.Get(ctxb, "s", "k")
	if gerr != nil {
		t.Fatal(gerr)
	}
	next := *rec
	next.Fence, next.Owner = rec.Fence+1, "thief"
	if err := store.Update(ctxb, &next, rec.Version()); err != nil {
		t.Fatal(err)
	}
	<-done
	if !errors.Is(cause, idemkit.ErrLockLost) || !errors.Is(err, idemkit.ErrFenced) {
		t.Fatalf("cause %v, result %v; want ErrLockLost and ErrFenced", cause, err)
	}
}

func TestLogsHashKeys(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, raw := range []bool{false, true} {
		buf.Reset()
		g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Logger: logger, LogKeys: raw})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Do(ctxb, idemkit.Call{Scope: "s", Key: "secret-key-123"}, ok("v")); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(buf.String(), "secret-key-123"); got != raw {
			t.Fatalf("LogKeys=%v: log contains the raw key = %v:\n%s", raw, got, buf.String())
		}
	}
}

func TestEventsCoverOutcomes(t *testing.T) {
	b := setup(t, nil)
	call := idemkit.Call{Scope: "s", Key: "k"}
	cl, _, err := b.g.Begin(ctxb, call)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.g.Do(ctxb, call, ok("x")); !errors.Is(err, idemkit.ErrInFlight) || b.obs.last(t).Outcome != idemkit.OutcomeInFlight {
		t.Fatalf("%v %+v", err, b.obs.last(t))
	}
	if _, err := cl.Finish(ctxb, []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	if ev := b.obs.last(t); ev.Outcome != idemkit.OutcomeExecuted || ev.Status != idemkit.StatusSucceeded || ev.Fence != 1 {
		t.Fatalf("%+v", ev)
	}
	if _, err := b.g.Do(ctxb, idemkit.Call{Scope: "s", Key: ""}, ok("x")); b.obs.last(t).Outcome != idemkit.OutcomeInvalid || err == nil {
		t.Fatalf("%+v", b.obs.last(t))
	}
}

// TestWatchdogKeepsClaim: with the watchdog on, a function running several leases keeps its claim:
// duplicates stay in flight and its result is recorded, not fenced.
func TestWatchdogKeepsClaim(t *testing.T) {
	t.Parallel()
	store := memory.NewStore()
	// Generous times: the watchdog renews every Lease/3, and a loaded CI machine can delay it (the
	// claim is lost only past a 2 s stall).
	g, err := idemkit.New(store, &idemkit.Options{Locker: memory.NewLocker(nil), Lease: 3 * time.Second, Watchdog: true})
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "s", Key: "k"}
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(ctxb, call, func(ctx context.Context) ([]byte, error) {
			close(started)
			<-release
			return []byte("v"), ctx.Err()
		})
		done <- err
	}()
	waitStarted(t, started, done)
	// Probe until well past several leases; the watchdog must keep the claim each time.
	deadline := time.Now().Add(8 * time.Second)
	probes := 0
	for time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		if _, err := g.Do(ctxb, call, ok("dup")); !errors.Is(err, idemkit.ErrInFlight) {
			t.Fatalf("probe %d: %v, want ErrInFlight", probes, err)
		}
		probes++
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("long function: %v", err)
	}
	if rec, _ := g.Get(ctxb, "s", "k"); rec.Status != idemkit.StatusSucceeded || string(rec.Response) != "v" {
		t.Fatalf("record %+v", rec)
	}
}

// TestMarkInProgressNeverCached: a duplicate that finds a mark while its function still runs (the
// lock was lost) is answered ErrDuplicate but does not cache the mark, so once the function fails
// with a retryable error the retry runs (issue 11, item 2).
func TestMarkInProgressNeverCached(t *testing.T) {
	b := setup(t, func(o *idemkit.Options) { o.LockTTL = time.Second })
	call := idemkit.Call{Scope: "s", Key: "k"}
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- b.g.Mark(ctxb, call, func(context.Context) error {
			close(started)
			<-release
			return errors.New("payment gateway timeout") // retryable: the mark is removed
		})
	}()
	<-started
	b.clock.Advance(2 * time.Second) // the first attempt's lock expires
	if err := b.g.Mark(ctxb, call, func(context.Context) error { return nil }); !errors.Is(err, idemkit.ErrDuplicate) {
		t.Fatalf("duplicate while the first runs: %v, want ErrDuplicate", err)
	}
	close(release)
	if err := <-done; err == nil {
		t.Fatal("the first attempt's error was lost")
	}
	ran := false
	if err := b.g.Mark(ctxb, call, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("retry after a retryable failure: ran=%v err=%v (answered from a cached in-progress mark)", ran, err)
	}
}

// TestTakeoverKeepsFingerprint: an attempt without a fingerprint that takes a failed record over keeps
// the payload the key was first used with, so a later different payload is still a mismatch (issue
// 11, item 9).
func TestTakeoverKeepsFingerprint(t *testing.T) {
	b := setup(t, nil)
	call := idemkit.Call{Scope: "s", Key: "k", Fingerprint: "amount=10"}
	if _, err := b.g.Do(ctxb, call, func(context.Context) ([]byte, error) { return nil, errors.New("timeout") }); err == nil {
		t.Fatal("want the retryable error")
	}
	if _, err := b.g.Do(ctxb, idemkit.Call{Scope: "s", Key: "k"}, func(context.Context) ([]byte, error) { return nil, errors.New("timeout") }); err == nil {
		t.Fatal("want the retryable error")
	}
	call.Fingerprint = "amount=99"
	if _, err := b.g.Do(ctxb, call, ok("paid 99")); !errors.Is(err, idemkit.ErrPayloadMismatch) {
		t.Fatalf("another payload after a takeover without fingerprint: %v, want ErrPayloadMismatch", err)
	}
	call.Fingerprint = "amount=10"
	if res, err := b.g.Do(ctxb, call, ok("paid 10")); err != nil || string(res.Value) != "paid 10" {
		t.Fatalf("the original payload: %+v, %v", res, err)
	}
}

// TestWatchdogRenewsLockAndLease: with a lock TTL far shorter than the run (and than MaxHold), the
// watchdog keeps the lock itself, not only the record's lease: another token can never take the lock
// while the function runs (issue 11, item 8).
func TestWatchdogRenewsLockAndLease(t *testing.T) {
	t.Parallel()
	locker := memory.NewLocker(nil)
	// The claim is lost only past a 1.3 s stall of the watchdog (it renews every LockTTL/3).
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{
		Locker: locker, Watchdog: true, LockTTL: 2 * time.Second, Lease: 4 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "s", Key: "k"}
	lockKey := "1:s:k" // the Guard's lock key for scope "s", key "k"
	_, err = g.Do(ctxb, call, func(ctx context.Context) ([]byte, error) {
		for i := range 10 { // 8s: four lock TTLs, two leases
			time.Sleep(800 * time.Millisecond)
			if _, err := locker.Acquire(ctxb, lockKey, "intruder", time.Second); !errors.Is(err, idemkit.ErrLocked) {
				return nil, fmt.Errorf("probe %d: another token got the lock (%v) while the function runs", i, err)
			}
			rec, err := g.Get(ctxb, "s", "k")
			if err != nil || rec.LeaseExpired(time.Now()) {
				return nil, fmt.Errorf("probe %d: the lease lapsed while the function runs: %+v %v", i, rec, err)
			}
		}
		return []byte("v"), ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitStarted waits until the long call's function runs (closing started), its claim taken: the
// probes that follow expect it in flight. It fails t if the call returned (done) first.
func waitStarted(t *testing.T, started <-chan struct{}, done <-chan error) {
	t.Helper()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the long call returned %v before its function ran", err)
	}
}

// TestWatchdogKeepsClaimPastTTL: a function the watchdog keeps running longer than the record's TTL
// keeps its claim: renewals move the expiry with the lease, so neither a duplicate (without a Locker,
// nothing else stands in its way) nor the sweeper takes a live claim for an expired one.
func TestWatchdogKeepsClaimPastTTL(t *testing.T) {
	t.Parallel()
	store := memory.NewStore()
	// The claim is lost only past a 1.3 s stall of the watchdog (it renews every Lease/3).
	g, err := idemkit.New(store, &idemkit.Options{Lease: 2 * time.Second, TTL: 2 * time.Second, Watchdog: true})
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "s", Key: "k"}
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	runs := atomic.Int64{}
	go func() {
		_, err := g.Do(ctxb, call, func(ctx context.Context) ([]byte, error) {
			runs.Add(1)
			close(started)
			<-release
			return []byte("v"), ctx.Err()
		})
		done <- err
	}()
	waitStarted(t, started, done)
	for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		if n, err := store.DeleteExpired(ctxb, time.Now(), 10); err != nil || n != 0 {
			t.Fatalf("sweeper: %d deleted, %v; the claim is alive", n, err)
		}
		if _, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) { runs.Add(1); return nil, nil }); !errors.Is(err, idemkit.ErrInFlight) {
			t.Fatalf("duplicate past the TTL: %v, want ErrInFlight", err)
		}
	}
	close(release)
	if err := <-done; err != nil || runs.Load() != 1 {
		t.Fatalf("long function: %v, %d runs", err, runs.Load())
	}
}

// deletingStore deletes a record right before the Guard's first Update of it, as a sweeper or a
// purge racing a takeover would.
type deletingStore struct {
	idemkit.Store
	armed atomic.Bool
}

func (s *deletingStore) Update(ctx context.Context, r *idemkit.Record, prev idemkit.Version) error {
	if s.armed.CompareAndSwap(true, false) {
		_ = s.Store.Delete(ctx, r.Scope, r.Key, prev)
	}
	return s.Store.Update(ctx, r, prev)
}

// TestTakeoverRacingDeletion: a takeover whose record is deleted between its read and its write runs
// on a fresh claim; the key is free, not in flight.
func TestTakeoverRacingDeletion(t *testing.T) {
	store := &deletingStore{Store: memory.NewStore()}
	g, err := idemkit.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "s", Key: "k"}
	if _, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) { return nil, errors.New("timeout") }); err == nil {
		t.Fatal("want the retryable error")
	}
	store.armed.Store(true) // the next Update, the takeover's, finds the record gone
	res, err := g.Do(ctxb, call, ok("v"))
	if err != nil || res.Replayed || string(res.Value) != "v" {
		t.Fatalf("takeover of a record deleted meanwhile: %+v, %v; want a fresh run", res, err)
	}
	if rec, err := g.Get(ctxb, "s", "k"); err != nil || rec.Status != idemkit.StatusSucceeded || rec.Fence < 2 {
		t.Fatalf("record %+v, %v; want SUCCEEDED with a fence above the deleted one's", rec, err)
	}
}
