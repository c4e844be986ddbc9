package idemkit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/record"
)

// slowClaimStore is a Store whose claims take long to land, as on a database that stalled (a
// failover, a metadata lock, a group commit behind a lock wait): once an Insert is written, took
// runs, standing for the time that passed meanwhile.
type slowClaimStore struct {
	idemkit.Store
	took func()
}

func (s slowClaimStore) Insert(ctx context.Context, rec *idemkit.Record) error {
	err := s.Store.Insert(ctx, rec)
	if err == nil {
		s.took()
	}
	return err
}

// lateClaimStores returns the Stores TestClaimLandedAfterItsLeaseIsRenewed runs on: memory, and a
// fresh MariaDB record table.
func lateClaimStores(t *testing.T) map[string]idemkit.Store {
	db := testsvc.MySQL(t, nil)
	name := testsvc.Name("lateclaim_")
	st, err := record.New(db, &record.Options{Table: name})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTable(ctxb); err != nil {
		t.Fatal(err)
	}
	testsvc.DropTable(t, db, name)
	return map[string]idemkit.Store{"memory": memory.NewStore(), "mariadb": st}
}

// TestClaimLandedAfterItsLeaseIsRenewed: the lease of an Execute-mode claim counts from the moment
// the claim was made, before its write; a write that took longer than the lease (the database stalled,
// the caller still waiting) landed a claim any other attempt could take over at once. The Guard ran
// the function on it all the same: a duplicate arriving while it ran took the key over and ran the
// business a second time beside it. A claim whose write took longer than a third of its lease is now
// renewed before its function runs, and one another attempt took over meanwhile is met as it
// stands now.
func TestClaimLandedAfterItsLeaseIsRenewed(t *testing.T) {
	const lease = time.Minute
	for name, base := range lateClaimStores(t) {
		t.Run(name+"/duplicate while the function runs", func(t *testing.T) {
			clk := idemtest.NewClock()
			slow := slowClaimStore{Store: base, took: func() { clk.Advance(lease + time.Second) }}
			g, err := idemkit.New(slow, &idemkit.Options{Lease: lease, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			dup, err := idemkit.New(base, &idemkit.Options{Lease: lease, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			call := idemkit.Call{Scope: "s", Key: testsvc.Name("dup-")}
			var runs atomic.Int32
			var dupErr error
			res, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) {
				runs.Add(1)
				_, dupErr = dup.Do(ctxb, call, func(context.Context) ([]byte, error) {
					runs.Add(1)
					return []byte("second"), nil
				})
				return []byte("first"), nil
			})
			if runs.Load() != 1 || !errors.Is(dupErr, idemkit.ErrInFlight) {
				t.Fatalf("the business ran %d times: the duplicate sent while the first ran (its claim written a lease late) answered %v, want ErrInFlight (the first answered %q, %v)",
					runs.Load(), dupErr, res.Value, err)
			}
			if err != nil || string(res.Value) != "first" {
				t.Fatalf("the first call answered %q, %v; want \"first\"", res.Value, err)
			}
		})
		t.Run(name+"/taken over before the function", func(t *testing.T) {
			clk := idemtest.NewClock()
			dup, err := idemkit.New(base, &idemkit.Options{Lease: lease, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			call := idemkit.Call{Scope: "s", Key: testsvc.Name("over-")}
			var runs atomic.Int32
			var once sync.Once
			var dupErr error
			slow := slowClaimStore{Store: base, took: func() {
				once.Do(func() {
					// The claim landed a lease late, and a retry came first: it took the key over.
					clk.Advance(lease + time.Second)
					_, dupErr = dup.Do(ctxb, call, func(context.Context) ([]byte, error) {
						runs.Add(1)
						return []byte("second"), nil
					})
				})
			}}
			g, err := idemkit.New(slow, &idemkit.Options{Lease: lease, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			res, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) {
				runs.Add(1)
				return []byte("first"), nil
			})
			if dupErr != nil {
				t.Fatalf("the retry that took the key over: %v", dupErr)
			}
			if runs.Load() != 1 {
				t.Fatalf("the business ran %d times: the call whose claim was taken over before its function answered %q, %v", runs.Load(), res.Value, err)
			}
			if err != nil || !res.Replayed || string(res.Value) != "second" {
				t.Fatalf("the call whose claim was taken over before its function answered %+v, %v; want the retry's result replayed", res, err)
			}
		})
	}
}

// heldUpdates is a Store whose takeovers (an Update to a higher fence) wait, once read is closed,
// until landed is closed: the attempt decided to take the record over, and its write lands later.
type heldUpdates struct {
	idemkit.Store
	read, landed chan struct{}
	once         sync.Once
}

func (s *heldUpdates) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	if rec.Fence > prev.Fence {
		s.once.Do(func() {
			close(s.read)
			<-s.landed
		})
	}
	return s.Store.Update(ctx, rec, prev)
}

// afterUpdates is a Store that calls after once an Update of it returned.
type afterUpdates struct {
	idemkit.Store
	after func()
}

func (s afterUpdates) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	err := s.Store.Update(ctx, rec, prev)
	s.after()
	return err
}

// TestLateClaimFencesATakeoverDecidedMeanwhile: a claim that landed after its lease is made again
// at the next fence, not merely renewed: a renewal changes no version, so a retry that read the
// lapsed claim before it and wrote its takeover after it took the key over all the same, and both ran
// the business.
func TestLateClaimFencesATakeoverDecidedMeanwhile(t *testing.T) {
	const lease = time.Minute
	for name, base := range lateClaimStores(t) {
		t.Run(name, func(t *testing.T) {
			clk := idemtest.NewClock()
			held := &heldUpdates{Store: base, read: make(chan struct{}), landed: make(chan struct{})}
			dup, err := idemkit.New(held, &idemkit.Options{Lease: lease, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			call := idemkit.Call{Scope: "s", Key: testsvc.Name("race-")}
			var runs atomic.Int32
			dupDone := make(chan error, 1)
			var landedOnce sync.Once
			slow := slowClaimStore{Store: afterUpdates{Store: base, after: func() { landedOnce.Do(func() { close(held.landed) }) }}, took: func() {
				// The claim landed a lease late, and a retry read it and decided to take it over.
				clk.Advance(lease + time.Second)
				go func() {
					_, err := dup.Do(ctxb, call, func(context.Context) ([]byte, error) {
						runs.Add(1)
						return []byte("second"), nil
					})
					dupDone <- err
				}()
				<-held.read
			}}
			g, err := idemkit.New(slow, &idemkit.Options{Lease: lease, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			res, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) {
				runs.Add(1)
				landedOnce.Do(func() { close(held.landed) }) // should nothing of the claim's have written since
				<-dupDone
				return []byte("first"), nil
			})
			if runs.Load() != 1 {
				t.Fatalf("the business ran %d times (the first call answered %q, %v)", runs.Load(), res.Value, err)
			}
		})
	}
}

// TestWatchdogCountsFromTheClaimsLease: the watchdog gives a claim up half a renewal period before
// its lease lapses when renewals keep failing, but it counted the lease from its own start, after the
// claim's write: a write that took a while (here under a third of the lease, so the claim is not
// renewed first) left the claim less lease than that, and the watchdog cancelled the function only
// after the lease had run out, when a duplicate had taken the key over and run the business beside
// it. It gives up by the lease the claim has.
func TestWatchdogCountsFromTheClaimsLease(t *testing.T) {
	const lease = 900 * time.Millisecond
	var offset atomic.Int64 // how far the Guards' clock is ahead of time.Now: the time the write "took"
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	base := memory.NewStore()
	slow := slowClaimStore{Store: renewalFailingStore{base}, took: func() { offset.Add(int64(lease * 3 / 10)) }}
	g, err := idemkit.New(slow, &idemkit.Options{Lease: lease, TTL: time.Minute, Watchdog: true, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	dup, err := idemkit.New(base, &idemkit.Options{Lease: lease, TTL: time.Minute, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	gaveUpBeforeDuplicate(t, g, dup)
}

// TestLateClaimOfACallerThatLeftIsReleased: a claim that landed late for a caller that left meanwhile
// (its context ended while the write waited) is not made again, and its function does not run; it is
// released as an abandoned claim is (finished FAILED), so a retry runs at once rather than meeting
// "in flight" for the rest of its lease.
func TestLateClaimOfACallerThatLeftIsReleased(t *testing.T) {
	const lease = time.Minute
	clk := idemtest.NewClock()
	ctx, leave := context.WithCancel(ctxb)
	defer leave()
	slow := slowClaimStore{Store: memory.NewStore(), took: func() { clk.Advance(lease / 2); leave() }}
	g, err := idemkit.New(slow, &idemkit.Options{Lease: lease, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "s", Key: "k"}
	var runs atomic.Int32
	_, err = g.Do(ctx, call, func(context.Context) ([]byte, error) { runs.Add(1); return nil, nil })
	t.Logf("the call whose caller left: %v", err)
	waitReleased(t, g, call, "the late claim of a caller that left")
	if runs.Load() != 0 {
		t.Fatalf("the function ran %d times for a caller that left before its claim landed", runs.Load())
	}
}

// landsAfterLeaving is a Store whose renewal of a claim that landed late (an Update to the next fence
// by the same owner) lands although its caller left meanwhile: the caller's context ends while the
// statement waits (behind a row lock, on a stalled server), the driver answers the context's error,
// and the statement completes all the same.
type landsAfterLeaving struct {
	idemkit.Store
	leave func()
}

func (s landsAfterLeaving) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	if rec.Fence > prev.Fence && rec.Owner == prev.Owner {
		s.leave()
		if err := s.Store.Update(context.WithoutCancel(ctx), rec, prev); err != nil {
			return err
		}
		return ctx.Err()
	}
	return s.Store.Update(ctx, rec, prev)
}

// TestLateClaimRenewalThatLandsAfterTheCallerLeftIsReleased: a claim that landed late is made again
// at the next fence before its function runs; when its caller left while that write waited and the
// write landed all the same, the claim it wrote (with a whole new lease) was left standing: the watch
// that releases a caller's abandoned claim looked only for the claim written first, and the caller's
// retry met "in flight" for a whole lease although nothing ran.
func TestLateClaimRenewalThatLandsAfterTheCallerLeftIsReleased(t *testing.T) {
	const lease = time.Minute
	for name, base := range lateClaimStores(t) {
		t.Run(name, func(t *testing.T) {
			clk := idemtest.NewClock()
			ctx, leave := context.WithCancel(ctxb)
			defer leave()
			slow := slowClaimStore{Store: landsAfterLeaving{Store: base, leave: leave}, took: func() { clk.Advance(lease / 2) }}
			g, err := idemkit.New(slow, &idemkit.Options{Lease: lease, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			call := idemkit.Call{Scope: "s", Key: testsvc.Name("left-")}
			var runs atomic.Int32
			_, err = g.Do(ctx, call, func(context.Context) ([]byte, error) { runs.Add(1); return nil, nil })
			t.Logf("the call whose caller left: %v", err)
			waitReleased(t, g, call, "the late claim of a caller that left, made again after it left")
			if runs.Load() != 0 {
				t.Fatalf("the function ran %d times for a caller that left before its claim was made again", runs.Load())
			}
			res, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) { runs.Add(1); return []byte("retry"), nil })
			if err != nil || string(res.Value) != "retry" || runs.Load() != 1 {
				t.Fatalf("the retry answered %q, %v after %d runs; want it run at once", res.Value, err, runs.Load())
			}
		})
	}
}

// failsRemake is a Store whose first write making a late claim again (an Update to the next fence by
// the same owner) fails, the caller still waiting: a connection that broke, a failover.
type failsRemake struct {
	idemkit.Store
	failed *atomic.Bool
}

func (s failsRemake) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	if rec.Fence > prev.Fence && rec.Owner == prev.Owner && s.failed.CompareAndSwap(false, true) {
		return errors.New("connection reset by peer")
	}
	return s.Store.Update(ctx, rec, prev)
}

// TestLateMarkNotMadeAgainIsReleased: a mark that landed late is made again before its function runs;
// when that write failed (the Store erred, the caller still waiting), the call answered
// ErrStoreUnavailable without running its function and left the mark standing, SUCCEEDED: a mark has no
// lease to lapse, so every retry got ErrDuplicate until the mark expired (Options.TTL, a day by
// default), and the function never ran. The claim a late call does not run on is released (finished
// FAILED, fenced on it), so a retry runs.
func TestLateMarkNotMadeAgainIsReleased(t *testing.T) {
	const lease = time.Minute
	for name, base := range lateClaimStores(t) {
		t.Run(name, func(t *testing.T) {
			clk := idemtest.NewClock()
			var failed atomic.Bool
			slow := slowClaimStore{Store: failsRemake{Store: base, failed: &failed}, took: func() {
				if !failed.Load() {
					clk.Advance(lease / 2)
				}
			}}
			g, err := idemkit.New(slow, &idemkit.Options{Lease: lease, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			call := idemkit.Call{Scope: "s", Key: testsvc.Name("mark-")}
			var runs atomic.Int32
			err = g.Mark(ctxb, call, func(context.Context) error { runs.Add(1); return nil })
			if !errors.Is(err, idemkit.ErrStoreUnavailable) || runs.Load() != 0 {
				t.Fatalf("the mark whose renewal failed: %v after %d runs; want ErrStoreUnavailable, nothing run", err, runs.Load())
			}
			// The retry comes at once: ErrDuplicate would be its final answer.
			err = g.Mark(ctxb, call, func(context.Context) error { runs.Add(1); return nil })
			if err != nil || runs.Load() != 1 {
				rec, gerr := g.Get(ctxb, call.Scope, call.Key)
				t.Fatalf("the retry of a mark its call did not run on: %v after %d runs (record %+v, %v); want it run", err, runs.Load(), rec, gerr)
			}
		})
	}
}

// waitReleased waits (at most 10s) until the record of call is FAILED: the claim what names was
// released.
func waitReleased(t *testing.T, g *idemkit.Guard, call idemkit.Call, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := g.Get(ctxb, call.Scope, call.Key)
		if err == nil && rec.Status == idemkit.StatusFailed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %+v, %v; want it released (FAILED)", what, rec, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
