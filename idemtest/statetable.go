package idemtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

const lease = 10 * time.Second

// guardFor returns a Guard over s with no Locker (the Store decides everything) on clock c.
func guardFor(t *testing.T, s idemkit.Store, c *Clock, mod func(*idemkit.Options)) *idemkit.Guard {
	t.Helper()
	o := &idemkit.Options{Lease: lease, TTL: time.Hour, Now: c.Now}
	if mod != nil {
		mod(o)
	}
	g, err := idemkit.New(s, o)
	must(t, err)
	return g
}

// counter is a guarded function that counts its runs and returns a fixed result.
type counter struct {
	runs   atomic.Int32
	result []byte
	err    error
}

func (c *counter) fn(ctx context.Context) ([]byte, error) {
	c.runs.Add(1)
	return c.result, c.err
}

func (c *counter) want(t testing.TB, runs int32) {
	t.Helper()
	if got := c.runs.Load(); got != runs {
		t.Fatalf("function ran %d times, want %d", got, runs)
	}
}

func wantStatus(t testing.TB, g *idemkit.Guard, call idemkit.Call, st idemkit.Status, fence int64) *idemkit.Record {
	t.Helper()
	rec, err := g.Get(ctxb, call.Scope, call.Key)
	must(t, err)
	if rec.Status != st || rec.Fence != fence {
		t.Fatalf("record %s fence %d, want %s fence %d", rec.Status, rec.Fence, st, fence)
	}
	return rec
}

func runStateTable(t *testing.T, newStore NewStore) {
	call := idemkit.Call{Scope: "POST /orders", Key: "key-1"}

	t.Run("NewKeyRunsOnceThenReplays", func(t *testing.T) {
		clk := NewClock()
		g := guardFor(t, newStore(t), clk, nil)
		c := &counter{result: []byte(`{"id":1}`)}
		res, err := g.Do(ctxb, call, c.fn)
		must(t, err)
		if res.Replayed || string(res.Value) != `{"id":1}` || res.Fence != 1 {
			t.Fatalf("first call: %+v", res)
		}
		for range 3 {
			res, err = g.Do(ctxb, call, c.fn)
			must(t, err)
			if !res.Replayed || string(res.Value) != `{"id":1}` || res.Fence != 1 {
				t.Fatalf("replay: %+v", res)
			}
		}
		c.want(t, 1)
		wantStatus(t, g, call, idemkit.StatusSucceeded, 1)
	})

	t.Run("PermanentErrorIsStoredAndReplayed", func(t *testing.T) {
		g := guardFor(t, newStore(t), NewClock(), nil)
		c := &counter{result: []byte("partial"), err: idemkit.Permanent(errors.New("insufficient funds"))}
		_, err := g.Do(ctxb, call, c.fn)
		if !idemkit.IsPermanent(err) {
			t.Fatalf("first call returned %v, want the permanent error", err)
		}
		res, err := g.Do(ctxb, call, c.fn)
		var rej *idemkit.RejectedError
		if !errors.As(err, &rej) || !errors.Is(err, idemkit.ErrRejected) || rej.Message != "insufficient funds" {
			t.Fatalf("replay returned %v, want RejectedError(insufficient funds)", err)
		}
		if !res.Replayed || string(res.Value) != "partial" {
			t.Fatalf("replay result %+v", res)
		}
		c.want(t, 1)
		wantStatus(t, g, call, idemkit.StatusRejected, 1)
	})

	t.Run("RetryableErrorAllowsRetry", func(t *testing.T) {
		g := guardFor(t, newStore(t), NewClock(), nil)
		c := &counter{err: errors.New("timeout talking to bank")}
		_, err := g.Do(ctxb, call, c.fn)
		if err == nil || err.Error() != "timeout talking to bank" {
			t.Fatalf("first call: %v", err)
		}
		rec := wantStatus(t, g, call, idemkit.StatusFailed, 1)
		if rec.Error != "timeout talking to bank" {
			t.Fatalf("stored error %q", rec.Error)
		}
		c.err, c.result = nil, []byte("ok")
		res, err := g.Do(ctxb, call, c.fn)
		must(t, err)
		if res.Replayed || res.Fence != 2 {
			t.Fatalf("retry: %+v, want a fresh run with fence 2", res)
		}
		c.want(t, 2)
		wantStatus(t, g, call, idemkit.StatusSucceeded, 2)
	})

	t.Run("InFlightWhileLeaseLive", func(t *testing.T) {
		clk := NewClock()
		g := guardFor(t, newStore(t), clk, nil)
		cl, _, err := g.Begin(ctxb, call)
		must(t, err)
		clk.Advance(lease / 2)
		c := &counter{}
		_, err = g.Do(ctxb, call, c.fn)
		var inf *idemkit.InFlightError
		if !errors.As(err, &inf) || !errors.Is(err, idemkit.ErrInFlight) {
			t.Fatalf("duplicate got %v, want InFlightError", err)
		}
		if inf.RetryAfter <= 0 || inf.RetryAfter > lease {
			t.Fatalf("RetryAfter %s, want within (0, %s]", inf.RetryAfter, lease)
		}
		c.want(t, 0)
		_, err = cl.Finish(ctxb, []byte("v"), nil)
		must(t, err)
		res, err := g.Do(ctxb, call, c.fn)
		must(t, err)
		if !res.Replayed || string(res.Value) != "v" {
			t.Fatalf("after finish: %+v", res)
		}
	})

	t.Run("TakeoverAfterLeaseFencesStaleHolder", func(t *testing.T) {
		clk := NewClock()
		g := guardFor(t, newStore(t), clk, nil)
		stale, _, err := g.Begin(ctxb, call)
		must(t, err)
		if stale.Fence() != 1 {
			t.Fatalf("first claim fence %d", stale.Fence())
		}
		clk.Advance(lease + time.Second)
		var seen int64
		res, err := g.Do(ctxb, call, func(ctx context.Context) ([]byte, error) {
			seen, _ = idemkit.FenceFromContext(ctx)
			return []byte("taker"), nil
		})
		must(t, err)
		if res.Fence != 2 || seen != 2 {
			t.Fatalf("takeover fence %d (context %d), want 2", res.Fence, seen)
		}
		_, err = stale.Finish(ctxb, []byte("stale"), nil)
		if !errors.Is(err, idemkit.ErrFenced) {
			t.Fatalf("stale finish: %v, want ErrFenced", err)
		}
		rec := wantStatus(t, g, call, idemkit.StatusSucceeded, 2)
		if string(rec.Response) != "taker" {
			t.Fatalf("stored %q, want the taker's result", rec.Response)
		}
	})

	t.Run("RecordWithGIDIsNeverTakenOver", func(t *testing.T) {
		clk := NewClock()
		g := guardFor(t, newStore(t), clk, nil)
		gcall := call
		gcall.GID = "gid-123"
		cl, _, err := g.Begin(ctxb, gcall)
		must(t, err)
		cl.Detach(ctxb)
		clk.Advance(lease * 10)
		c := &counter{}
		_, err = g.Do(ctxb, gcall, c.fn)
		wantErr(t, err, idemkit.ErrInFlight)
		c.want(t, 0)
		rec := wantStatus(t, g, gcall, idemkit.StatusProcessing, 1)
		if rec.GID != "gid-123" {
			t.Fatalf("gid %q", rec.GID)
		}
	})

	t.Run("ExpiredRecordCountsAsAbsent", func(t *testing.T) {
		clk := NewClock()
		g := guardFor(t, newStore(t), clk, nil)
		c := &counter{result: []byte("v")}
		_, err := g.Do(ctxb, call, c.fn)
		must(t, err)
		clk.Advance(time.Hour)
		res, err := g.Do(ctxb, call, c.fn)
		must(t, err)
		if res.Replayed || res.Fence != 2 {
			t.Fatalf("after expiry: %+v, want a fresh run with fence 2", res)
		}
		c.want(t, 2)
	})

	t.Run("PayloadMismatch", func(t *testing.T) {
		g := guardFor(t, newStore(t), NewClock(), nil)
		c := &counter{result: []byte("v")}
		a, b := call, call
		a.Fingerprint, b.Fingerprint = "sha-a", "sha-b"
		_, err := g.Do(ctxb, a, c.fn)
		must(t, err)
		_, err = g.Do(ctxb, b, c.fn)
		wantErr(t, err, idemkit.ErrPayloadMismatch)
		res, err := g.Do(ctxb, a, c.fn)
		must(t, err)
		if !res.Replayed {
			t.Fatal("same fingerprint was not replayed")
		}
		res, err = g.Do(ctxb, call, c.fn) // no fingerprint given: nothing to compare
		must(t, err)
		if !res.Replayed {
			t.Fatal("call without fingerprint was not replayed")
		}
		c.want(t, 1)
	})

	t.Run("MarkMode", func(t *testing.T) {
		g := guardFor(t, newStore(t), NewClock(), nil)
		runs := 0
		ok := func(context.Context) error { runs++; return nil }
		must(t, g.Mark(ctxb, call, ok))
		wantErr(t, g.Mark(ctxb, call, ok), idemkit.ErrDuplicate)
		if runs != 1 {
			t.Fatalf("ran %d times", runs)
		}
		wantStatus(t, g, call, idemkit.StatusSucceeded, 1)

		retry := idemkit.Call{Scope: call.Scope, Key: "retry"}
		boom := errors.New("boom")
		if err := g.Mark(ctxb, retry, func(context.Context) error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("failing mark: %v", err)
		}
		// The failed attempt's effects outside the record stand: the mark is FAILED, and the retry
		// takes it over at the next fence.
		wantStatus(t, g, retry, idemkit.StatusFailed, 1)
		must(t, g.Mark(ctxb, retry, ok))
		wantStatus(t, g, retry, idemkit.StatusSucceeded, 2)

		perm := idemkit.Call{Scope: call.Scope, Key: "perm"}
		if err := g.Mark(ctxb, perm, func(context.Context) error { return idemkit.Permanent(boom) }); !errors.Is(err, boom) {
			t.Fatalf("permanent mark: %v", err)
		}
		wantErr(t, g.Mark(ctxb, perm, ok), idemkit.ErrDuplicate)
		wantStatus(t, g, perm, idemkit.StatusRejected, 1)
	})

	t.Run("PanicReleasesClaim", func(t *testing.T) {
		g := guardFor(t, newStore(t), NewClock(), nil)
		func() {
			defer func() {
				if r := recover(); r != "kaboom" {
					t.Fatalf("recovered %v, want the original panic", r)
				}
			}()
			_, _ = g.Do(ctxb, call, func(context.Context) ([]byte, error) { panic("kaboom") })
		}()
		wantStatus(t, g, call, idemkit.StatusFailed, 1)
		c := &counter{result: []byte("v")}
		res, err := g.Do(ctxb, call, c.fn)
		must(t, err)
		if res.Replayed || res.Fence != 2 {
			t.Fatalf("retry after panic: %+v", res)
		}
	})

	t.Run("DetachLeavesProcessing", func(t *testing.T) {
		clk := NewClock()
		g := guardFor(t, newStore(t), clk, nil)
		cl, _, err := g.Begin(ctxb, call)
		must(t, err)
		cl.Detach(ctxb)
		wantStatus(t, g, call, idemkit.StatusProcessing, 1)
		_, err = cl.Finish(ctxb, nil, nil)
		if err == nil {
			t.Fatal("Finish after Detach succeeded")
		}
		clk.Advance(lease + time.Second) // no GID: taken over after the lease
		c := &counter{}
		_, err = g.Do(ctxb, call, c.fn)
		must(t, err)
		c.want(t, 1)
	})

	t.Run("SettleDetachedClaim", func(t *testing.T) {
		clk := NewClock()
		g := guardFor(t, newStore(t), clk, nil)
		gcall := call
		gcall.GID = "gid-9"
		cl, _, err := g.Begin(ctxb, gcall)
		must(t, err)
		rec := cl.Record()
		cl.Detach(ctxb)
		clk.Advance(lease * 2)
		must(t, g.Settle(ctxb, &rec, []byte("from reconciler"), nil))
		got := wantStatus(t, g, gcall, idemkit.StatusSucceeded, 1)
		if string(got.Response) != "from reconciler" {
			t.Fatalf("response %q", got.Response)
		}
		// Settling again from the same (now stale) read is refused.
		wantErr(t, g.Settle(ctxb, &rec, nil, errors.New("rolled back")), idemkit.ErrFenced)
		res, err := g.Do(ctxb, gcall, (&counter{}).fn)
		must(t, err)
		if !res.Replayed || string(res.Value) != "from reconciler" {
			t.Fatalf("replay %+v", res)
		}

		// A rolled-back transaction leaves the key FAILED: a retry runs.
		other := idemkit.Call{Scope: call.Scope, Key: "rolled-back", GID: "gid-10"}
		cl, _, err = g.Begin(ctxb, other)
		must(t, err)
		rec = cl.Record()
		cl.Detach(ctxb)
		must(t, g.Settle(ctxb, &rec, nil, errors.New("saga rolled back")))
		wantStatus(t, g, other, idemkit.StatusFailed, 1)
		c := &counter{}
		_, err = g.Do(ctxb, idemkit.Call{Scope: other.Scope, Key: other.Key}, c.fn)
		must(t, err)
		c.want(t, 1)
	})

	t.Run("ExtendKeepsLease", func(t *testing.T) {
		clk := NewClock()
		g := guardFor(t, newStore(t), clk, nil)
		cl, _, err := g.Begin(ctxb, call)
		must(t, err)
		for range 3 {
			clk.Advance(lease * 3 / 4)
			must(t, cl.Extend(ctxb))
			_, err := g.Do(ctxb, call, (&counter{}).fn)
			wantErr(t, err, idemkit.ErrInFlight)
		}
		_, err = cl.Finish(ctxb, []byte("v"), nil)
		must(t, err)
		wantStatus(t, g, call, idemkit.StatusSucceeded, 1)
	})

	t.Run("BadInputChangesNothing", func(t *testing.T) {
		s := newStore(t)
		g := guardFor(t, s, NewClock(), nil)
		c := &counter{}
		long := make([]byte, idemkit.DefaultMaxKeyLen+1)
		for i := range long {
			long[i] = 'k'
		}
		for name, key := range map[string]string{
			"empty": "", "oversize": string(long), "not utf-8": "ab\xffcd", "control": "a\nb", "nul": "a\x00b", "del": "a\x7fb",
		} {
			_, err := g.Do(ctxb, idemkit.Call{Scope: "s", Key: key}, c.fn)
			if !errors.Is(err, idemkit.ErrInvalidKey) {
				t.Fatalf("%s key: %v, want ErrInvalidKey", name, err)
			}
			if err := g.Mark(ctxb, idemkit.Call{Scope: "s", Key: key}, func(context.Context) error { return nil }); !errors.Is(err, idemkit.ErrInvalidKey) {
				t.Fatalf("%s key in Mark: %v", name, err)
			}
		}
		_, err := g.Do(ctxb, idemkit.Call{Scope: "", Key: "k"}, c.fn)
		wantErr(t, err, idemkit.ErrInvalidKey)
		_, err = g.Do(ctxb, idemkit.Call{Scope: "s", Key: "k"}, nil)
		wantErr(t, err, idemkit.ErrNilFunc)
		c.want(t, 0)
		_, err = g.Get(ctxb, "s", "k")
		wantErr(t, err, idemkit.ErrNotFound)

		// A key longer than a column is stored hashed and still deduplicated.
		longKey := string(long[:idemkit.DefaultMaxKeyLen])
		c.result = []byte("v")
		for range 2 {
			_, err = g.Do(ctxb, idemkit.Call{Scope: "s", Key: longKey}, c.fn)
			must(t, err)
		}
		c.want(t, 1)
		if _, err := s.Get(ctxb, "s", idemkit.StoredForm(longKey)); err != nil {
			t.Fatalf("hashed long key not stored: %v", err)
		}
	})
}

// StormConfig configures [Storm].
type StormConfig struct {
	// Stores back one Guard each; give Stores over the same table through separate connection
	// pools to play separate processes. At least one.
	Stores []idemkit.Store
	// Lockers, when given, go one to each Guard (same length as Stores).
	Lockers []idemkit.Locker
	// Goroutines per key. Defaults to 64 for the first round (one key) and 4 per key for the second.
	Goroutines int
	// Keys in the second round. Defaults to 200.
	Keys int
	// Tx sends the calls through [idemkit.Guard.Tx] (the Stores must implement [idemkit.TxBeginner])
	// instead of Guard.Do. A function may then run more than once for a key (a duplicate that raced
	// past the read before the function rolls back); the Storm checks that one transaction commits per
	// key instead.
	Tx bool
}

// Storm checks the central promise under concurrency: goroutines spread over several Guards submit the
// same key; the function runs exactly once per key and every caller gets the original result (fresh or
// replayed) or ErrInFlight. First one key from 64 goroutines, then Keys keys at once.
func Storm(t *testing.T, cfg StormConfig) {
	t.Helper()
	if len(cfg.Stores) == 0 {
		t.Fatal("Storm needs at least one Store")
	}
	guards := make([]*idemkit.Guard, len(cfg.Stores))
	dbs := make([]*stormTx, len(cfg.Stores))
	for i, s := range cfg.Stores {
		if cfg.Tx {
			b, ok := s.(idemkit.TxBeginner)
			if !ok {
				t.Fatalf("Storm with Tx: Store %T does not begin transactions", s)
			}
			dbs[i] = &stormTx{TxBeginner: b}
		}
		// Generous lease and finish timeout: a slow machine (SQLite under the race detector) must not
		// turn a timing into a failure.
		o := &idemkit.Options{Lease: 5 * time.Minute, TTL: time.Hour, FinishTimeout: 2 * time.Minute}
		if cfg.Lockers != nil {
			o.Locker = cfg.Lockers[i]
		}
		g, err := idemkit.New(s, o)
		must(t, err)
		guards[i] = g
	}
	scope := fmt.Sprintf("storm-%d", time.Now().UnixNano())
	round := func(keys, perKey int) {
		var mu sync.Mutex
		runs := make(map[string]int)
		commits := make(map[string]int)
		var replayed, inflight, fresh atomic.Int32
		parallel(keys*perKey, func(i int) {
			key := fmt.Sprintf("k%d", i%keys)
			g := guards[i%len(guards)]
			fn := func(context.Context) ([]byte, error) {
				mu.Lock()
				runs[key]++
				mu.Unlock()
				time.Sleep(time.Millisecond) // widen the window for duplicates
				return []byte("result-" + key), nil
			}
			var res idemkit.Result
			var err error
			if cfg.Tx {
				res, err = g.Tx(ctxb, dbs[i%len(dbs)], idemkit.Call{Scope: scope, Key: key}, func(ctx context.Context, tx idemkit.TxStore) ([]byte, error) {
					stormOf(tx).committed = func() {
						mu.Lock()
						commits[key]++
						mu.Unlock()
					}
					return fn(ctx)
				})
			} else {
				res, err = g.Do(ctxb, idemkit.Call{Scope: scope, Key: key}, fn)
			}
			switch {
			case err == nil && string(res.Value) == "result-"+key:
				if res.Replayed {
					replayed.Add(1)
				} else {
					fresh.Add(1)
				}
			case errors.Is(err, idemkit.ErrInFlight):
				inflight.Add(1)
			default:
				t.Errorf("key %s: result %q, error %v", key, res.Value, err)
			}
		})
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			switch {
			case cfg.Tx && commits[key] != 1:
				t.Errorf("key %s: %d transactions committed (%d runs), want exactly 1", key, commits[key], runs[key])
			case !cfg.Tx && runs[key] != 1:
				t.Errorf("key %s ran %d times, want exactly 1", key, runs[key])
			}
		}
		if int(fresh.Load()) != keys {
			t.Errorf("%d fresh results for %d keys", fresh.Load(), keys)
		}
		t.Logf("%d keys × %d calls over %d guards: %d fresh, %d replayed, %d in flight",
			keys, perKey, len(guards), fresh.Load(), replayed.Load(), inflight.Load())
		scope += "-2"
	}
	round(1, cmpOr(cfg.Goroutines, 64))
	round(cmpOr(cfg.Keys, 200), cmpOr(cfg.Goroutines/16, 4))
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// stormTx counts, per key, the transactions of a Storm that committed a function's run.
type stormTx struct{ idemkit.TxBeginner }

func (b *stormTx) BeginTx(ctx context.Context) (idemkit.TxStore, error) {
	tx, err := b.TxBeginner.BeginTx(ctx)
	if err != nil {
		return nil, err
	}
	return b.wrap(tx), nil
}

// BeginTxGet forwards to the Store's [idemkit.BeginGetter], or reads as the Guard would without one.
func (b *stormTx) BeginTxGet(ctx context.Context, scope, key string) (idemkit.TxStore, *idemkit.Record, error) {
	return beginTxGet(ctx, b.TxBeginner, b.wrap, scope, key)
}

func (b *stormTx) wrap(tx idemkit.TxStore) idemkit.TxStore {
	st := &stormTxStore{TxStore: tx}
	return withInsertCommit(st, tx, func() {
		if st.committed != nil {
			st.committed()
		}
	})
}

// stormOf returns the stormTxStore of a transaction stormTx began.
func stormOf(tx idemkit.TxStore) *stormTxStore {
	if ic, ok := tx.(*insertCommitting); ok {
		tx = ic.TxStore
	}
	return tx.(*stormTxStore)
}

type stormTxStore struct {
	idemkit.TxStore
	committed func() // set by the function; called once the transaction committed
}

func (t *stormTxStore) Commit() error {
	err := t.TxStore.Commit()
	if err == nil && t.committed != nil {
		t.committed()
	}
	return err
}
