package idemkit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
)

// TestFinishCountsAfterALongFunction: Execute and Mark mode wrote their outcome with the expiry the
// claim was given (TTL from the claim, or, renewed by the watchdog, the lease's end): a function that
// outlasted TTL finished a record already expired, or expiring with the lease, which replays nothing
// and is not cached, and the duplicate right after the answer ran the business again — as the Tx
// modes did before TestTxRecordCountsAfterALongFunction. Such a record counts for TTL from the finish.
func TestFinishCountsAfterALongFunction(t *testing.T) {
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
		modes := map[string]func(key string) error{
			"Do": func(key string) error {
				res, err := g.Do(ctx, idemkit.Call{Scope: "s", Key: key}, func(context.Context) ([]byte, error) {
					runs[key]++
					clk.Advance(ttl + time.Second) // outlasts TTL; nobody takes it over meanwhile
					return []byte("v"), nil
				})
				if err == nil && string(res.Value) != "v" {
					t.Errorf("Do (Locker %v): value %q, want v", locker, res.Value)
				}
				return err
			},
			"Begin": func(key string) error {
				cl, res, err := g.Begin(ctx, idemkit.Call{Scope: "s", Key: key})
				if cl == nil {
					if err == nil && !res.Replayed {
						t.Errorf("Begin (Locker %v): no claim, no replay", locker)
					}
					return err
				}
				runs[key]++
				clk.Advance(ttl + time.Second)
				_, err = cl.Finish(ctx, []byte("v"), nil)
				return err
			},
			"Mark": func(key string) error {
				return g.Mark(ctx, idemkit.Call{Scope: "s", Key: key}, func(context.Context) error {
					runs[key]++
					clk.Advance(ttl + time.Second)
					return nil
				})
			},
		}
		for name, call := range modes {
			if err := call(name); err != nil {
				t.Fatalf("%s (Locker %v): first call: %v", name, locker, err)
			}
			clk.Advance(time.Second) // the duplicate comes right after the answer
			if err := call(name); err != nil && !errors.Is(err, idemkit.ErrDuplicate) {
				t.Errorf("%s (Locker %v): duplicate: %v", name, locker, err)
			}
			if runs[name] != 1 {
				t.Errorf("%s (Locker %v): the duplicate right after the answer ran the function again (%d runs)", name, locker, runs[name])
			}
			rec, err := s.Get(ctx, "s", name)
			if err != nil {
				t.Fatal(err)
			}
			if want := clk.Now().Add(ttl - 2*time.Second); rec.ExpiresAt.Before(want) {
				t.Errorf("%s (Locker %v): record expires at %s, want TTL from the finish (%s)", name, locker, rec.ExpiresAt, want)
			}
		}
	}
}

// TestFinishCountsAfterAWatchdogHeldFunction: a function the watchdog kept alive past TTL finished
// with the expiry of its last renewal, a lease away: the record and its cached result were gone a
// lease after the answer, and a retry then ran the business again.
func TestFinishCountsAfterAWatchdogHeldFunction(t *testing.T) {
	ctx := context.Background()
	const lease, ttl = 150 * time.Millisecond, 1200 * time.Millisecond
	for _, mode := range []string{"Do", "Mark"} {
		s := memory.NewStore()
		g, err := idemkit.New(s, &idemkit.Options{Lease: lease, TTL: ttl, Watchdog: true, Locker: memory.NewLocker(nil)})
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		call := func() error {
			c := idemkit.Call{Scope: "s", Key: mode}
			if mode == "Mark" {
				return g.Mark(ctx, c, func(context.Context) error { runs++; time.Sleep(ttl + 2*lease); return nil })
			}
			_, err := g.Do(ctx, c, func(context.Context) ([]byte, error) { runs++; time.Sleep(ttl + 2*lease); return []byte("v"), nil })
			return err
		}
		if err := call(); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		time.Sleep(2 * lease) // well within TTL of the answer, past the last renewal's lease
		if err := call(); err != nil && !errors.Is(err, idemkit.ErrDuplicate) {
			t.Errorf("%s: duplicate: %v", mode, err)
		}
		if runs != 1 {
			t.Errorf("%s: the retry %s after the answer ran the function again (%d runs)", mode, 2*lease, runs)
		}
	}
}
