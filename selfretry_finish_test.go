package idemkit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
)

// selfRetryingOwnUpdateStore is a third-party Store that retries a claim's own write (a finish, a
// renewal, a settlement: an Update that keeps the fence and owner) whose reply was lost, once armed:
// the write landed, and its retry, conditioned on the version it just replaced, answers ErrFenced.
type selfRetryingOwnUpdateStore struct {
	idemkit.Store
	armed atomic.Bool
}

func (s *selfRetryingOwnUpdateStore) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	err := s.Store.Update(ctx, rec, prev)
	if err == nil && rec.Fence == prev.Fence && rec.Owner == prev.Owner && s.armed.CompareAndSwap(true, false) {
		return fmt.Errorf("%w: record moved on (retried after a lost reply)", idemkit.ErrFenced)
	}
	return err
}

// TestStoreRetryingItsOwnFinishIsNotFenced: a Store that retries an UPDATE whose reply was lost
// answers ErrFenced for the call's own finish or renewal, which landed (TestStoreRetryingItsOwnWrite
// IsNotADuplicate is the claim's INSERT and takeover). Finish answered ErrFenced, "finished by another
// as SUCCEEDED (a reconciler's settlement)", although its outcome stood — a Do's caller told its work
// was not recorded, a failed Mark's consumer told nothing of its function's error; Extend answered
// ErrFenced for a renewal that landed, and the watchdog cancelled a function whose claim was alive;
// Settle reported a settlement of its own as another's. The read that tells why a write was fenced
// now recognises the write itself (the claim's version and the values written): the call goes on as
// though the Store had answered.
func TestStoreRetryingItsOwnFinishIsNotFenced(t *testing.T) {
	rdb := testsvc.Redis(t)
	prefix := testsvc.Name("selffinish-") + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	locker := lock.New(rdb, &lock.Options{Prefix: prefix})
	// newGuard returns a Guard over st with the Redis Locker, and opts (nil for none) applied.
	newGuard := func(t *testing.T, st idemkit.Store, opts *idemkit.Options) *idemkit.Guard {
		if opts == nil {
			opts = &idemkit.Options{}
		}
		opts.Locker = locker
		g, err := idemkit.New(st, opts)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for name, base := range lateClaimStores(t) {
		t.Run(name+"/Do", func(t *testing.T) {
			st := &selfRetryingOwnUpdateStore{Store: base}
			g := newGuard(t, st, nil)
			call := idemkit.Call{Scope: "s", Key: testsvc.Name("selffinish-")}
			var runs atomic.Int32
			do := func() (idemkit.Result, error) {
				return g.Do(ctxb, call, func(context.Context) ([]byte, error) { runs.Add(1); return []byte("v"), nil })
			}
			st.armed.Store(true)
			if res, err := do(); err != nil || string(res.Value) != "v" || res.Replayed {
				t.Fatalf("Do whose Store retried its finish: %+v, %v; want the function's result", res, err)
			}
			if res, err := do(); err != nil || !res.Replayed || string(res.Value) != "v" || runs.Load() != 1 {
				t.Fatalf("duplicate: %+v, %v after %d runs, want the replay", res, err, runs.Load())
			}
		})
		t.Run(name+"/Mark failed", func(t *testing.T) {
			st := &selfRetryingOwnUpdateStore{Store: base}
			g := newGuard(t, st, nil)
			call := idemkit.Call{Scope: "s", Key: testsvc.Name("selffinish-")}
			st.armed.Store(true)
			if err := g.Mark(ctxb, call, func(context.Context) error { return errUpstream }); !errors.Is(err, errUpstream) || errors.Is(err, idemkit.ErrFenced) {
				t.Fatalf("failed Mark whose Store retried its release: %v; want the function's error alone", err)
			}
			ran := false
			if err := g.Mark(ctxb, call, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
				t.Fatalf("retry: %v (ran %v), want the function run", err, ran)
			}
		})
		t.Run(name+"/Mark outlived", func(t *testing.T) {
			clk := idemtest.NewClock()
			st := &selfRetryingOwnUpdateStore{Store: base}
			g := newGuard(t, st, &idemkit.Options{Now: clk.Now, TTL: time.Hour})
			call := idemkit.Call{Scope: "s", Key: testsvc.Name("selffinish-")}
			st.armed.Store(true)
			if err := g.Mark(ctxb, call, func(context.Context) error { clk.Advance(2 * time.Hour); return nil }); err != nil {
				t.Fatalf("Mark that outlasted TTL, whose Store retried its expiry's move: %v; want nil", err)
			}
			if err := g.Mark(ctxb, call, func(context.Context) error { return nil }); !errors.Is(err, idemkit.ErrDuplicate) {
				t.Fatalf("duplicate: %v, want ErrDuplicate", err)
			}
		})
		t.Run(name+"/Extend", func(t *testing.T) {
			st := &selfRetryingOwnUpdateStore{Store: base}
			g := newGuard(t, st, nil)
			call := idemkit.Call{Scope: "s", Key: testsvc.Name("selffinish-")}
			cl, _, err := g.Begin(ctxb, call)
			if err != nil || cl == nil {
				t.Fatalf("Begin: %v", err)
			}
			time.Sleep(5 * time.Millisecond) // the renewal's times differ from the claim's, in milliseconds too
			st.armed.Store(true)
			if err := cl.Extend(ctxb); err != nil {
				t.Fatalf("Extend whose Store retried the renewal: %v; want nil", err)
			}
			rec, err := g.Get(ctxb, call.Scope, call.Key)
			if err != nil || !rec.LeaseUntil.Equal(cl.Record().LeaseUntil.Truncate(time.Millisecond)) && !rec.LeaseUntil.Equal(cl.Record().LeaseUntil) {
				t.Fatalf("record %+v, %v; want the renewed lease %v", rec, err, cl.Record().LeaseUntil)
			}
			if res, err := cl.Finish(ctxb, []byte("v"), nil); err != nil || string(res.Value) != "v" {
				t.Fatalf("Finish after the renewal: %+v, %v", res, err)
			}
		})
		t.Run(name+"/Settle", func(t *testing.T) {
			st := &selfRetryingOwnUpdateStore{Store: base}
			g := newGuard(t, st, nil)
			call := idemkit.Call{Scope: "s", Key: testsvc.Name("selffinish-"), GID: "gid-1"}
			cl, _, err := g.Begin(ctxb, call)
			if err != nil || cl == nil {
				t.Fatalf("Begin: %v", err)
			}
			cl.Detach(ctxb)
			rec := cl.Record()
			st.armed.Store(true)
			if err := g.Settle(ctxb, &rec, []byte("v"), nil); err != nil {
				t.Fatalf("Settle whose Store retried it: %v; want nil", err)
			}
			res, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) { return nil, errors.New("ran") })
			if err != nil || !res.Replayed || string(res.Value) != "v" {
				t.Fatalf("duplicate: %+v, %v, want the settled result replayed", res, err)
			}
		})
		t.Run(name+"/settled by another", func(t *testing.T) {
			// Still fenced: a reconciler settled the claim with another outcome before its Finish.
			g := newGuard(t, base, nil)
			call := idemkit.Call{Scope: "s", Key: testsvc.Name("selffinish-")}
			cl, _, err := g.Begin(ctxb, call)
			if err != nil || cl == nil {
				t.Fatalf("Begin: %v", err)
			}
			rec := cl.Record()
			if err := g.Settle(ctxb, &rec, []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
			if _, err := cl.Finish(ctxb, []byte("v"), nil); !errors.Is(err, idemkit.ErrFenced) || !strings.Contains(err.Error(), "finished by another") {
				t.Fatalf("Finish after another's settlement: %v; want ErrFenced", err)
			}
		})
	}
}

// TestStoreRetryingItsOwnLateClaimRenewal: a claim whose write landed late is made again before its
// function runs (see TestClaimLandedAfterItsLeaseIsRenewed), a takeover at the next fence; a Store
// that retries that UPDATE after a lost reply answers ErrFenced although it landed. The call started
// over from the insert and met the claim made again as another attempt's: a Mark ErrDuplicate for a
// function that never ran (the mark standing for its TTL), a Do ErrInFlight until its lease ran out.
// The claim started over carries the fence of the write it made, and the read after the insert's
// conflict recognises it as the call's own (as TestStoreRetryingItsOwnWriteIsNotADuplicate).
func TestStoreRetryingItsOwnLateClaimRenewal(t *testing.T) {
	const lease = time.Minute
	for name, base := range lateClaimStores(t) {
		for _, mode := range []string{"Mark", "Do"} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				clk := idemtest.NewClock()
				retrying := &selfRetryingStore{Store: base}
				st := slowClaimStore{Store: retrying, took: func() { clk.Advance(lease) }}
				g, err := idemkit.New(st, &idemkit.Options{Lease: lease, Now: clk.Now})
				if err != nil {
					t.Fatal(err)
				}
				call := idemkit.Call{Scope: "s", Key: testsvc.Name("selflate-")}
				var runs atomic.Int32
				run := func() (idemkit.Result, error) {
					if mode == "Mark" {
						return idemkit.Result{}, g.Mark(ctxb, call, func(context.Context) error { runs.Add(1); return nil })
					}
					return g.Do(ctxb, call, func(context.Context) ([]byte, error) { runs.Add(1); return []byte("v"), nil })
				}
				retrying.armedTakeover.Store(true)
				if res, err := run(); err != nil || runs.Load() != 1 || mode == "Do" && (res.Replayed || string(res.Value) != "v") {
					rec, gerr := g.Get(ctxb, call.Scope, call.Key)
					t.Fatalf("late claim whose Store retried its renewal: %+v, %v after %d runs (record %+v, %v); want the function run once", res, err, runs.Load(), rec, gerr)
				}
				if _, err := run(); runs.Load() != 1 || mode == "Mark" && !errors.Is(err, idemkit.ErrDuplicate) || mode == "Do" && err != nil {
					t.Fatalf("duplicate: %v after %d runs, want the first answer", err, runs.Load())
				}
			})
		}
	}
}
