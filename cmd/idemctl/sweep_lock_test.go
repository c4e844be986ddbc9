package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// TestSweepReleasesTheDeadHoldersLock: with a LockTTL longer than the Lease, a claim whose holder died
// keeps its Redis lock after a sweep recovered its record. idemctl sweep --yes recovered it lock-blind
// (record.Store.RecoverStale) although it was given the Redis: every retry of the key answered in
// flight until the lock expired, and nothing named the holder any more (release refuses a FAILED
// record). With --redis it now deletes that lock by the holder's token, as
// sweep.RecordTasksWithLocker does, so the retry runs; a lock another attempt holds stays.
func TestSweepReleasesTheDeadHoldersLock(t *testing.T) {
	for _, dialect := range []string{"mysql", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			f := setup(t, dialect)
			f.env["IDEMCTL_NAMESPACE"] = ""
			ctx := context.Background()
			lk := lock.New(f.rdb, &lock.Options{Prefix: f.prefix})
			g, err := idemkit.New(f.store, &idemkit.Options{
				Namespace: testNS, Locker: lk, Lease: testLease, LockTTL: time.Hour, TTL: testTTL, Now: f.clock.Now,
			})
			if err != nil {
				t.Fatal(err)
			}
			// Two holders that died mid-request; the lock of the second expired and another attempt
			// took it since.
			for _, k := range []string{"k-dead", "k-relocked"} {
				if c, _, err := g.Begin(ctx, idemkit.Call{Scope: scopeA, Key: k}); err != nil || c == nil {
					t.Fatalf("Begin %s: %v", k, err)
				}
			}
			addr, err := g.Address(scopeA, "k-relocked")
			if err != nil {
				t.Fatal(err)
			}
			rec, err := f.store.Get(ctx, addr.Scope, addr.Key)
			if err != nil {
				t.Fatal(err)
			}
			other := addr.LockKey
			if err := lk.Release(ctx, other, rec.Owner, nil, 0); err != nil { // as if it expired
				t.Fatal(err)
			}
			if _, err := lk.Acquire(ctx, other, "another attempt", time.Hour); err != nil {
				t.Fatal(err)
			}

			f.clock.Advance(testLease + time.Second)
			f.want(t, exitOK, nil, []string{"sweep", "--yes"}, "recovered 2 stuck claim(s)")
			ran := false
			if _, err := g.Do(ctx, idemkit.Call{Scope: scopeA, Key: "k-dead"}, func(context.Context) ([]byte, error) {
				ran = true
				return []byte("v"), nil
			}); err != nil || !ran {
				t.Fatalf("retry of the swept claim: ran %v, %v; want it to run", ran, err)
			}
			if _, err := lk.Acquire(ctx, other, "probe", time.Second); !errors.Is(err, idemkit.ErrLocked) {
				t.Fatalf("the other attempt's lock on a swept key: %v, want it still held (ErrLocked)", err)
			}
		})
	}
}
