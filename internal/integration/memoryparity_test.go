package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// parityBackend is a Store and a Locker a program may run on: the memory backends it unit-tests with,
// or record.Store and lock.Locker it runs on in production.
type parityBackend struct {
	name   string
	store  parityStore
	locker func(clk *idemtest.Clock) idemkit.Locker
}

// parityStore is what the scenarios need of a Store: Guard.Tx's transactions and the sweeper's hooks.
type parityStore interface {
	idemkit.TxBeginner
	sweep.Target
}

// parityBackends returns the memory backends and record.Store on a fresh table of the database open
// opens with lock.Locker on the test Redis (with Lua scripts, as on a Redis before 7.0, when scripts is
// set), under a fresh prefix.
func parityBackends(t *testing.T, open func(testing.TB, *gorm.Config) *gorm.DB, scripts bool) []parityBackend {
	t.Helper()
	db := open(t, nil)
	table := testsvc.Name("parity_")
	s, err := record.New(db, &record.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	testsvc.DropTable(t, db, table)
	rdb := testsvc.Redis(t)
	prefix := testsvc.Name("idemkit-parity-") + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	return []parityBackend{
		{"memory", memory.NewStore(), func(clk *idemtest.Clock) idemkit.Locker {
			return memory.NewLocker(&memory.LockerOptions{Now: clk.Now})
		}},
		{"database+Redis", s, func(*idemtest.Clock) idemkit.Locker {
			return lock.New(rdb, &lock.Options{Prefix: prefix, Scripts: scripts})
		}},
	}
}

// parityScenario runs calls through a Guard and writes what a caller sees of each to its trace.
type parityScenario struct {
	name     string
	noLocker bool
	opts     idemkit.Options
	run      func(p *parityRun)
}

// parityRun is one scenario on one backend.
type parityRun struct {
	t     *testing.T
	g     *idemkit.Guard
	store parityStore
	lk    idemkit.Locker
	clk   *idemtest.Clock
	trace strings.Builder
}

func (p *parityRun) log(format string, args ...any) { fmt.Fprintf(&p.trace, format+"\n", args...) }

// call returns a fresh call of scope: keys are unique per run, but equal across backends.
func (p *parityRun) call(scope, key string) idemkit.Call { return idemkit.Call{Scope: scope, Key: key} }

// seen is what a caller can tell of a call's answer: its value, whether it was replayed, its fence
// and which of idemkit's errors it matches (messages and RetryAfter differ between backends and are
// left out).
func seen(res idemkit.Result, err error) string {
	var kinds []string
	for _, k := range []struct {
		name string
		err  error
	}{{"InFlight", idemkit.ErrInFlight}, {"PayloadMismatch", idemkit.ErrPayloadMismatch}, {"Rejected", idemkit.ErrRejected},
		{"Duplicate", idemkit.ErrDuplicate}, {"Fenced", idemkit.ErrFenced}, {"StoreUnavailable", idemkit.ErrStoreUnavailable},
		{"LockUnavailable", idemkit.ErrLockUnavailable}, {"InvalidKey", idemkit.ErrInvalidKey},
		{"RollbackReplayed", idemkit.ErrRollbackReplayed}, {"Canceled", context.Canceled}, {"DeadlineExceeded", context.DeadlineExceeded}} {
		if errors.Is(err, k.err) {
			kinds = append(kinds, k.name)
		}
	}
	if err != nil && len(kinds) == 0 {
		kinds = append(kinds, "error "+err.Error())
	}
	v := "nil"
	if res.Value != nil {
		v = fmt.Sprintf("%q", res.Value)
	}
	return fmt.Sprintf("value %s replayed %v fence %d errors [%s]", v, res.Replayed, res.Fence, strings.Join(kinds, " "))
}

// record is what the Store holds for a call, as far as a program reads it.
func (p *parityRun) record(c idemkit.Call) string {
	r, err := p.g.Get(context.Background(), c.Scope, c.Key)
	if err != nil {
		return fmt.Sprintf("record: %v", errors.Is(err, idemkit.ErrNotFound))
	}
	return fmt.Sprintf("record: %s fence %d fingerprint %q response %q error %q mark %v", r.Status, r.Fence, r.Fingerprint, r.Response, r.Error, r.IsMark())
}

func value(v []byte) idemkit.Func { return func(context.Context) ([]byte, error) { return v, nil } }

func failing(err error) idemkit.Func {
	return func(context.Context) ([]byte, error) { return nil, err }
}

// TestMemoryBackendsBehaveAsDatabaseAndRedis: the memory Store and Locker are what programs unit-test
// with, on the promise that they behave as record.Store and lock.Locker do in production. The same
// scenarios run through a Guard on each must look the same to the caller: results, replays, fences,
// errors and the records left. Each difference this found was a unit test passing on memory for a
// program that misbehaves on MariaDB and Redis, or the reverse.
func TestMemoryBackendsBehaveAsDatabaseAndRedis(t *testing.T) {
	ctx := context.Background()
	scenarios := []parityScenario{
		{name: "ResultsAndReplays", run: func(p *parityRun) {
			for i, v := range [][]byte{[]byte("v"), {}, nil, []byte("L1:x"), []byte("E"), {0, 1, 2}} {
				c := p.call("do", fmt.Sprint(i))
				p.log("Do %s", seen(p.g.Do(ctx, c, value(v))))
				p.log("Do again %s", seen(p.g.Do(ctx, c, value([]byte("other")))))
				c = p.call("tx", fmt.Sprint(i))
				p.log("Tx %s", seen(p.g.Tx(ctx, p.store, c, func(context.Context, idemkit.TxStore) ([]byte, error) { return v, nil })))
				p.log("Do after Tx %s", seen(p.g.Do(ctx, c, value(nil))))
			}
		}},
		{name: "RejectedAndFailed", run: func(p *parityRun) {
			c := p.call("do", "rejected")
			p.log("Do %s", seen(p.g.Do(ctx, c, func(context.Context) ([]byte, error) {
				return []byte("why"), idemkit.Permanent(errors.New("refused"))
			})))
			p.log("Do again %s", seen(p.g.Do(ctx, c, value(nil))))
			p.log("%s", p.record(c))
			c = p.call("do", "failed")
			p.log("Do %s", seen(p.g.Do(ctx, c, failing(errors.New("try again")))))
			p.log("%s", p.record(c))
			p.log("Do again %s", seen(p.g.Do(ctx, c, value([]byte("second")))))
			c = p.call("tx", "rejected")
			p.log("Tx %s", seen(p.g.Tx(ctx, p.store, c, func(context.Context, idemkit.TxStore) ([]byte, error) {
				return nil, idemkit.Permanent(errors.New("refused"))
			})))
			p.log("Tx again %s", seen(p.g.Tx(ctx, p.store, c, func(context.Context, idemkit.TxStore) ([]byte, error) { return nil, nil })))
			c = p.call("tx", "failed")
			p.log("Tx %s", seen(p.g.Tx(ctx, p.store, c, func(context.Context, idemkit.TxStore) ([]byte, error) {
				return nil, errors.New("try again")
			})))
			p.log("%s", p.record(c))
		}},
		{name: "Fingerprints", run: func(p *parityRun) {
			c := p.call("fp", "done")
			c.Fingerprint = "a"
			p.log("Do a %s", seen(p.g.Do(ctx, c, value([]byte("v")))))
			c.Fingerprint = "b"
			p.log("Do b %s", seen(p.g.Do(ctx, c, value(nil))))
			c.Fingerprint = ""
			p.log("Do without %s", seen(p.g.Do(ctx, c, value(nil))))
			c = p.call("fp", "failed")
			c.Fingerprint = "a"
			p.log("Do a %s", seen(p.g.Do(ctx, c, failing(errors.New("try again")))))
			c.Fingerprint = "b"
			p.log("Do b %s", seen(p.g.Do(ctx, c, value(nil))))
			c.Fingerprint = ""
			p.log("Do without %s", seen(p.g.Do(ctx, c, value([]byte("n")))))
			p.log("%s", p.record(c))
			c = p.call("fp", "held")
			c.Fingerprint = "a"
			cl, res, err := p.g.Begin(ctx, c)
			p.log("Begin a %s", seen(res, err))
			c.Fingerprint = "b"
			p.log("Do b while held %s", seen(p.g.Do(ctx, c, value(nil))))
			if cl != nil {
				p.log("Finish %s", seen(cl.Finish(ctx, []byte("f"), nil)))
			}
		}},
		{name: "Marks", run: func(p *parityRun) {
			c := p.call("mark", "m")
			p.log("Mark retryable %v", p.g.Mark(ctx, c, func(context.Context) error { return errors.New("try again") }))
			p.log("Mark permanent %v", p.g.Mark(ctx, c, func(context.Context) error { return idemkit.Permanent(errors.New("no")) }))
			p.log("%s", p.record(c))
			p.log("Mark %v", errors.Is(p.g.Mark(ctx, c, func(context.Context) error { return nil }), idemkit.ErrDuplicate))
			c = p.call("txmark", "m")
			p.log("TxMark permanent %v", p.g.TxMark(ctx, p.store, c, func(context.Context, idemkit.TxStore) error { return idemkit.Permanent(errors.New("no")) }))
			p.log("%s", p.record(c))
			p.log("TxMark %v", p.g.TxMark(ctx, p.store, c, func(context.Context, idemkit.TxStore) error { return nil }))
			p.log("TxMark again %v", errors.Is(p.g.TxMark(ctx, p.store, c, func(context.Context, idemkit.TxStore) error { return nil }), idemkit.ErrDuplicate))
			p.log("Do %s", seen(p.g.Do(ctx, c, value(nil))))
			c = p.call("marktx", "m")
			tx, err := p.store.BeginTx(ctx)
			if err != nil {
				p.t.Fatal(err)
			}
			p.log("MarkTx %v", p.g.MarkTx(ctx, tx, c, func(context.Context) error { return nil }))
			p.log("MarkTx in the same transaction %v", errors.Is(p.g.MarkTx(ctx, tx, c, func(context.Context) error { return nil }), idemkit.ErrDuplicate))
			p.log("Commit %v", tx.Commit())
			p.log("%s", p.record(c))
			c = p.call("dotx", "d")
			if tx, err = p.store.BeginTx(ctx); err != nil {
				p.t.Fatal(err)
			}
			p.log("DoTx %s", seen(p.g.DoTx(ctx, tx, c, value([]byte("d")))))
			p.log("DoTx in the same transaction %s", seen(p.g.DoTx(ctx, tx, c, value([]byte("e")))))
			p.log("Commit %v", tx.Commit())
			p.log("Do %s", seen(p.g.Do(ctx, c, value(nil))))
		}},
		{name: "GuardedCallsInsideTx", run: func(p *parityRun) {
			bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			p.log("Tx %s", seen(p.g.Tx(bounded, p.store, p.call("outer", "k"), func(ctx context.Context, _ idemkit.TxStore) ([]byte, error) {
				p.log("inner Do %s", seen(p.g.Do(ctx, p.call("inner", "k"), value([]byte("i")))))
				p.log("inner Mark %v", p.g.Mark(ctx, p.call("inner-mark", "k"), func(context.Context) error { return nil }))
				p.log("inner Tx %s", seen(p.g.Tx(ctx, p.store, p.call("inner-tx", "k"), func(context.Context, idemkit.TxStore) ([]byte, error) {
					return []byte("n"), nil
				})))
				return []byte("o"), nil
			})))
		}},
		{name: "ConcurrentDoTxWithoutLocker", noLocker: true, run: func(p *parityRun) {
			c := p.call("dotx", "race")
			first, err := p.store.BeginTx(ctx)
			if err != nil {
				p.t.Fatal(err)
			}
			second, err := p.store.BeginTx(ctx)
			if err != nil {
				p.t.Fatal(err)
			}
			p.log("DoTx first %s", seen(p.g.DoTx(ctx, first, c, value([]byte("one")))))
			// The second runs its function before the first commits (it read nothing), and meets the
			// first's record when it writes its own.
			running, proceed, done := make(chan struct{}), make(chan struct{}), make(chan string)
			go func() {
				res, err := p.g.DoTx(ctx, second, c, func(context.Context) ([]byte, error) {
					close(running)
					<-proceed
					return []byte("two"), nil
				})
				_ = second.Rollback()
				done <- seen(res, err)
			}()
			<-running
			p.log("Commit first %v", first.Commit())
			close(proceed)
			p.log("DoTx second %s", <-done)
			p.log("%s", p.record(c))
		}},
		{name: "CallerLeftBeforeItsClaim", noLocker: true, run: func(p *parityRun) {
			// Nothing was written, and nothing can land: no claim is watched for, and Wait returns.
			left, leave := context.WithCancel(ctx)
			leave()
			c := p.call("left", "do")
			p.log("Do %s", seen(p.g.Do(left, c, value([]byte("v")))))
			p.log("Mark %s", seen(idemkit.Result{}, p.g.Mark(left, p.call("left", "mark"), func(context.Context) error { return nil })))
			bounded, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			p.log("Wait %v", p.g.Wait(bounded))
			p.log("%s", p.record(c))
		}},
		{name: "SweptClaimsLock", opts: idemkit.Options{Lease: time.Second, LockTTL: time.Hour}, run: func(p *parityRun) {
			c := p.call("swept", "k")
			_, res, err := p.g.Begin(ctx, c) // its holder dies
			p.log("Begin %s", seen(res, err))
			p.clk.Advance(2 * time.Second)
			sw, err := sweep.New(&sweep.Options{Now: p.clk.Now}, sweep.RecordTasksWithLocker(p.store, p.lk)...)
			if err != nil {
				p.t.Fatal(err)
			}
			stats, err := sw.RunOnce(ctx)
			p.log("sweep %v %v", stats, err)
			p.log("%s", p.record(c))
			p.log("Do %s", seen(p.g.Do(ctx, c, value([]byte("r")))))
		}},
	}
	for _, db := range []struct {
		name string
		open func(testing.TB, *gorm.Config) *gorm.DB
	}{{"MariaDB", testsvc.MySQL}, {"PostgreSQL", testsvc.Postgres}} {
		for _, scripts := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/scripts=%v", db.name, scripts), func(t *testing.T) {
				backends := parityBackends(t, db.open, scripts)
				for _, sc := range scenarios {
					t.Run(sc.name, func(t *testing.T) {
						traces := make([]string, len(backends))
						for i, b := range backends {
							clk := idemtest.NewClock()
							o := sc.opts
							o.Now = clk.Now
							p := &parityRun{t: t, store: b.store, clk: clk}
							if !sc.noLocker {
								p.lk = b.locker(clk)
								o.Locker = p.lk
							}
							g, err := idemkit.New(b.store, &o)
							if err != nil {
								t.Fatal(err)
							}
							p.g = g
							sc.run(p)
							traces[i] = p.trace.String()
						}
						if traces[0] != traces[1] {
							t.Errorf("%s and %s differ:\n--- %s\n%s--- %s\n%s", backends[0].name, backends[1].name,
								backends[0].name, traces[0], backends[1].name, traces[1])
						}
					})
				}
			})
		}
	}
}
