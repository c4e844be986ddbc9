package idemkit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
)

// finishDownStore fails every finish (an Update that changes no fence and leaves PROCESSING) while
// down is set, as a database that went away after the claim: the call's finish fails, and its
// rewrite in the background fails too until the database is back. Claims and reads go through.
type finishDownStore struct {
	idemkit.Store
	down atomic.Bool
}

func (s *finishDownStore) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	if s.down.Load() && rec.Fence == prev.Fence && rec.Owner == prev.Owner && rec.Status != idemkit.StatusProcessing {
		return errConnReset
	}
	return s.Store.Update(ctx, rec, prev)
}

// TestUnwrittenFinishKeepsItsLock: a finish whose write failed is written again in the background
// (see TestUnwrittenFinishIsWrittenLater), but the call released its lock at once. A retry in that
// gap met the record as the claim left it: a Mark whose function failed retryably left its mark
// SUCCEEDED, and the retry got ErrDuplicate, final — a msgx Mark consumer acknowledged a message
// whose function had failed; an Execute claim whose function outlasted its lease was taken over and
// its work, done, ran a second time. The rewrite keeps the call's lock until it has landed (or its
// retries end): a retry in the gap is in flight, retryable, and then meets the outcome written.
func TestUnwrittenFinishKeepsItsLock(t *testing.T) {
	const lease, ttl = time.Minute, time.Hour
	rdb := testsvc.Redis(t)
	prefix := testsvc.Name("finishlock-") + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	lockers := map[string]func() idemkit.Locker{
		"memory lock": func() idemkit.Locker { return memory.NewLocker(nil) },
		"redis lock":  func() idemkit.Locker { return lock.New(rdb, &lock.Options{Prefix: prefix}) },
	}
	cases := []struct {
		name string
		// first is the first call's function's error; outlive, when set, moves the clock past the
		// lease and the TTL while it runs (a function that outlasted them without a watchdog: a
		// mark's finish then moves its expiry).
		mode    string
		first   error
		outlive bool
		// A retry while the finish is unwritten is in flight (or, with gapDup, a duplicate, which a
		// permanent failure is anyway); after is what a retry gets once it is written, and ran
		// whether its function ran then.
		gapDup bool
		after  error
		ran    bool
	}{
		{name: "Mark/failed", mode: "Mark", first: errUpstream, ran: true},
		{name: "Mark/rejected", mode: "Mark", first: idemkit.Permanent(errors.New("card declined")), gapDup: true, after: idemkit.ErrDuplicate},
		{name: "Mark/succeeded past its TTL", mode: "Mark", outlive: true, after: idemkit.ErrDuplicate},
		{name: "Do/succeeded past its lease", mode: "Do", outlive: true},
		{name: "Do/failed", mode: "Do", first: errUpstream, ran: true},
	}
	for storeName, base := range lateClaimStores(t) {
		for lockName, newLocker := range lockers {
			for _, c := range cases {
				t.Run(storeName+"/"+lockName+"/"+c.name, func(t *testing.T) {
					clk := idemtest.NewClock()
					st := &finishDownStore{Store: base}
					g, err := idemkit.New(st, &idemkit.Options{Locker: newLocker(), Lease: lease, TTL: ttl, Now: clk.Now})
					if err != nil {
						t.Fatal(err)
					}
					call := idemkit.Call{Scope: "s", Key: testsvc.Name("finishlock-")}
					var runs atomic.Int32
					run := func(fail error, outlive bool) (idemkit.Result, error) {
						fn := func(context.Context) ([]byte, error) {
							runs.Add(1)
							if outlive {
								clk.Advance(2 * ttl)
							}
							return []byte("v"), fail
						}
						if c.mode == "Mark" {
							return idemkit.Result{}, g.Mark(ctxb, call, func(ctx context.Context) error { _, err := fn(ctx); return err })
						}
						return g.Do(ctxb, call, fn)
					}
					st.down.Store(true)
					if _, err := run(c.first, c.outlive); !errors.Is(err, idemkit.ErrStoreUnavailable) || runs.Load() != 1 {
						t.Fatalf("call whose finish failed: %v after %d runs, want ErrStoreUnavailable after one run", err, runs.Load())
					}
					// The database still refuses the finish: its rewrite has not landed.
					for range 3 {
						if res, err := run(nil, false); !errors.Is(err, idemkit.ErrInFlight) && !(c.gapDup && errors.Is(err, idemkit.ErrDuplicate)) || runs.Load() != 1 {
							rec, gerr := g.Get(ctxb, call.Scope, call.Key)
							t.Fatalf("retry while the finish is unwritten: %+v, %v after %d runs (record %+v, %v); want ErrInFlight and no run", res, err, runs.Load(), rec, gerr)
						}
						time.Sleep(20 * time.Millisecond)
					}
					st.down.Store(false)
					deadline := time.Now().Add(10 * time.Second)
					for {
						res, err := run(nil, false)
						if !errors.Is(err, idemkit.ErrInFlight) {
							wantRuns := int32(1)
							if c.ran {
								wantRuns = 2
							}
							switch {
							case runs.Load() != wantRuns:
								t.Fatalf("retry once the finish is written: %+v, %v after %d runs, want %d runs", res, err, runs.Load(), wantRuns)
							case c.after != nil && !errors.Is(err, c.after):
								t.Fatalf("retry once the finish is written: %v, want %v", err, c.after)
							case c.after == nil && err != nil:
								t.Fatalf("retry once the finish is written: %v", err)
							case c.mode == "Do" && !c.ran && (!res.Replayed || string(res.Value) != "v"):
								t.Fatalf("retry once the finish is written: %+v, want the first call's result replayed", res)
							}
							return
						}
						if time.Now().After(deadline) {
							t.Fatalf("retry once the database is back: still %v", err)
						}
						time.Sleep(10 * time.Millisecond)
					}
				})
			}
		}
	}
}
