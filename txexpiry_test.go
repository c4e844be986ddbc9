package idemkit_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
)

// TestTxRecordCountsAfterALongFunction: the Tx modes write their record with the function's outcome
// once it returned, but its expiry was counted from the call's start: a function that outlasted TTL
// (a slow transaction, TTL as short as Lease) committed a record already expired, and the duplicate
// right after the answer ran the business a second time. The record counts for TTL from its write.
func TestTxRecordCountsAfterALongFunction(t *testing.T) {
	ctx := context.Background()
	const ttl = 10 * time.Second
	for _, locker := range []bool{false, true} {
		clk := idemtest.NewClock()
		s := memory.NewStore()
		o := &idemkit.Options{Lease: ttl, TTL: ttl, Now: clk.Now}
		if locker {
			o.Locker = memory.NewLocker(&memory.LockerOptions{Now: clk.Now})
		}
		g, err := idemkit.New(s, o)
		if err != nil {
			t.Fatal(err)
		}
		runs := map[string]int{}
		long := func(key string) func() {
			return func() { runs[key]++; clk.Advance(ttl + time.Second) } // outlasts TTL
		}
		modes := map[string]func(key string) error{
			"Tx": func(key string) error {
				_, err := g.Tx(ctx, s, idemkit.Call{Scope: "s", Key: key}, func(context.Context, idemkit.TxStore) ([]byte, error) {
					long(key)()
					return []byte("v"), nil
				})
				return err
			},
			"DoTx": func(key string) error {
				tx, err := s.BeginTx(ctx)
				if err != nil {
					return err
				}
				if _, err := g.DoTx(ctx, tx, idemkit.Call{Scope: "s", Key: key}, func(context.Context) ([]byte, error) {
					long(key)()
					return []byte("v"), nil
				}); err != nil {
					_ = tx.Rollback()
					return err
				}
				return tx.Commit()
			},
			"TxMark": func(key string) error {
				return g.TxMark(ctx, s, idemkit.Call{Scope: "s", Key: key}, func(context.Context, idemkit.TxStore) error {
					long(key)()
					return nil
				})
			},
			"MarkTx": func(key string) error {
				tx, err := s.BeginTx(ctx)
				if err != nil {
					return err
				}
				if err := g.MarkTx(ctx, tx, idemkit.Call{Scope: "s", Key: key}, func(context.Context) error {
					long(key)()
					return nil
				}); err != nil {
					_ = tx.Rollback()
					return err
				}
				return tx.Commit()
			},
		}
		for name, call := range modes {
			if err := call(name); err != nil {
				t.Fatalf("%s (Locker %v): first call: %v", name, locker, err)
			}
			clk.Advance(time.Second) // the duplicate comes right after the answer
			_ = call(name)
			if runs[name] != 1 {
				t.Errorf("%s (Locker %v): the duplicate right after the answer ran the function again (%d runs)", name, locker, runs[name])
			}
			rec, err := s.Get(ctx, "s", name)
			if err != nil {
				t.Fatal(err)
			}
			if !rec.ExpiresAt.After(clk.Now()) {
				t.Errorf("%s (Locker %v): record expires at %s, before the duplicate came", name, locker, rec.ExpiresAt)
			}
		}
	}
}
