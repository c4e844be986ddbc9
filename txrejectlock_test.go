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

// rejectDownDB fails every write of a REJECTED record made through the TxBeginner itself (outside a
// transaction: Guard.Tx stores a permanent failure so, after rolling the function's writes back)
// while down is set, as a database that went away after the rollback. Transactions go through.
type rejectDownDB struct {
	idemkit.TxBeginner
	down atomic.Bool
}

func (s *rejectDownDB) Insert(ctx context.Context, rec *idemkit.Record) error {
	if s.down.Load() && rec.Status == idemkit.StatusRejected {
		return errConnReset
	}
	return s.TxBeginner.Insert(ctx, rec)
}

func (s *rejectDownDB) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	if s.down.Load() && rec.Status == idemkit.StatusRejected {
		return errConnReset
	}
	return s.TxBeginner.Update(ctx, rec, prev)
}

// TestTxUnwrittenRejectionKeepsItsLock: Guard.Tx stores a permanent failure REJECTED after the
// rollback, in its own write. When that write failed it was not written again and the lock was
// released at once: the caller was told its request was rejected (a final answer: an HTTP 422, a
// message dead-lettered), and a retry of the key ran the function again and succeeded — a duplicate
// answered differently from the original. The rejection is now written again in the background, as
// a finish whose write failed is (see TestUnwrittenFinishKeepsItsLock), and the call's lock is kept
// until it lands: a retry meanwhile is in flight, and then gets the rejection replayed.
func TestTxUnwrittenRejectionKeepsItsLock(t *testing.T) {
	rdb := testsvc.Redis(t)
	prefix := testsvc.Name("txrejectlock-") + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	lockers := map[string]func() idemkit.Locker{
		"memory lock": func() idemkit.Locker { return memory.NewLocker(nil) },
		"redis lock":  func() idemkit.Locker { return lock.New(rdb, &lock.Options{Prefix: prefix}) },
	}
	declined := idemkit.Permanent(errors.New("card declined"))
	for storeName, base := range lateClaimStores(t) {
		for lockName, newLocker := range lockers {
			// over: the key holds a FAILED record before the call (a failed attempt's), which the
			// rejection takes over rather than inserting.
			for _, over := range []bool{false, true} {
				name := storeName + "/" + lockName + "/new key"
				if over {
					name = storeName + "/" + lockName + "/over a failed record"
				}
				t.Run(name, func(t *testing.T) {
					db := &rejectDownDB{TxBeginner: base.(idemkit.TxBeginner)}
					g, err := idemkit.New(db, &idemkit.Options{Locker: newLocker(), Now: idemtest.NewClock().Now})
					if err != nil {
						t.Fatal(err)
					}
					call := idemkit.Call{Scope: "s", Key: testsvc.Name("txrejectlock-")}
					if over {
						if _, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) { return nil, errUpstream }); !errors.Is(err, errUpstream) {
							t.Fatalf("failed attempt: %v", err)
						}
					}
					var runs atomic.Int32
					run := func(fail error) (idemkit.Result, error) {
						return g.Tx(ctxb, db, call, func(context.Context, idemkit.TxStore) ([]byte, error) {
							runs.Add(1)
							return []byte("v"), fail
						})
					}
					db.down.Store(true)
					if _, err := run(declined); !errors.Is(err, idemkit.ErrStoreUnavailable) || !errors.Is(err, declined) || runs.Load() != 1 {
						t.Fatalf("call whose rejection was not written: %v after %d runs, want ErrStoreUnavailable and its error after one run", err, runs.Load())
					}
					// The database still refuses the rejection: its rewrite has not landed.
					for range 3 {
						if res, err := run(nil); !errors.Is(err, idemkit.ErrInFlight) || runs.Load() != 1 {
							rec, gerr := g.Get(ctxb, call.Scope, call.Key)
							t.Fatalf("retry while the rejection is unwritten: %+v, %v after %d runs (record %+v, %v); want ErrInFlight and no run", res, err, runs.Load(), rec, gerr)
						}
						time.Sleep(20 * time.Millisecond)
					}
					db.down.Store(false)
					deadline := time.Now().Add(10 * time.Second)
					for {
						res, err := run(nil)
						if !errors.Is(err, idemkit.ErrInFlight) {
							if !errors.Is(err, idemkit.ErrRejected) || !res.Replayed || runs.Load() != 1 {
								t.Fatalf("retry once the rejection is written: %+v, %v after %d runs, want the rejection replayed", res, err, runs.Load())
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
