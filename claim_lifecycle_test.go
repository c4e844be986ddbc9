package idemkit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
)

// realGuard returns a Guard on a fresh MariaDB record table and the test Redis (a prefix of the
// test's own), with a one-minute lease on a test clock, its Store and its Locker; and an Admin of
// the table and Redis on the same clock.
func realGuard(t *testing.T, mod func(*idemkit.Options)) (*idemkit.Guard, *admin.Admin, *lock.Locker, *idemtest.Clock) {
	t.Helper()
	db := testsvc.MySQL(t, nil)
	name := testsvc.Name("claim_")
	st, err := record.New(db, &record.Options{Table: name})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTable(ctxb); err != nil {
		t.Fatal(err)
	}
	testsvc.DropTable(t, db, name)
	rdb := testsvc.Redis(t)
	prefix := testsvc.Name("claim-test-") + ":"
	testsvc.CleanRedis(t, rdb, prefix)
	lk := lock.New(rdb, &lock.Options{Prefix: prefix})
	clock := idemtest.NewClock()
	o := &idemkit.Options{Locker: lk, Lease: time.Minute, Now: clock.Now}
	if mod != nil {
		mod(o)
	}
	g, err := idemkit.New(st, o)
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admin.New(db, &admin.Options{Table: name, Redis: rdb, RedisPrefix: prefix, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return g, adm, lk, clock
}

// TestExtendAfterTheEndIsRefused: Extend on a claim already finished or detached returns an error
// and writes nothing. Before, it renewed the lease of the finished (or detached) record, with the
// version it had written, so the write landed.
func TestExtendAfterTheEndIsRefused(t *testing.T) {
	g, _, _, clock := realGuard(t, nil)
	for _, end := range []string{"finish", "detach"} {
		call := idemkit.Call{Scope: "s", Key: end}
		cl, _, err := g.Begin(ctxb, call)
		if err != nil || cl == nil {
			t.Fatalf("Begin: %v", err)
		}
		if end == "finish" {
			if _, err := cl.Finish(ctxb, []byte("v"), nil); err != nil {
				t.Fatal(err)
			}
		} else {
			cl.Detach(ctxb)
		}
		before, err := g.Get(ctxb, call.Scope, call.Key)
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		if err := cl.Extend(ctxb); err == nil {
			t.Errorf("%s: Extend after the claim's end: nil error", end)
		}
		after, err := g.Get(ctxb, call.Scope, call.Key)
		if err != nil {
			t.Fatal(err)
		}
		if !after.LeaseUntil.Equal(before.LeaseUntil) || !after.UpdatedAt.Equal(before.UpdatedAt) || !after.ExpiresAt.Equal(before.ExpiresAt) {
			t.Errorf("%s: Extend after the claim's end wrote the record: %+v, was %+v", end, after, before)
		}
	}
}

// TestExtendKeepsAClaimWhoseLockRanOut: in Execute mode the record is the claim. A lock that ran out
// while the record is still the claim's (LockTTL shorter than the work) does not end the claim:
// Extend renews the record's lease, duplicates stay in flight, and the claim finishes. Before, Extend
// returned ErrLockNotHeld without renewing the lease (a watchdog then cancelled live work, and the
// lease ran out under it).
func TestExtendKeepsAClaimWhoseLockRanOut(t *testing.T) {
	g, _, lk, clock := realGuard(t, nil)
	call := idemkit.Call{Scope: "s", Key: "k"}
	cl, _, err := g.Begin(ctxb, call)
	if err != nil || cl == nil {
		t.Fatalf("Begin: %v", err)
	}
	ad, err := g.Address(call.Scope, call.Key)
	if err != nil {
		t.Fatal(err)
	}
	// The lock runs out (deleted as its expiry would).
	if err := lk.Release(ctxb, ad.LockKey, cl.Record().Owner, nil, 0); err != nil {
		t.Fatal(err)
	}
	clock.Advance(50 * time.Second)
	if err := cl.Extend(ctxb); err != nil {
		t.Fatalf("Extend of a claim whose record is its own, its lock gone: %v", err)
	}
	rec, err := g.Get(ctxb, call.Scope, call.Key)
	if err != nil {
		t.Fatal(err)
	}
	if want := clock.Now().Add(time.Minute); !rec.LeaseUntil.Equal(want) {
		t.Fatalf("lease until %v, want %v", rec.LeaseUntil, want)
	}
	clock.Advance(50 * time.Second) // past the first lease, within the renewed one
	ran := false
	if _, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) { ran = true; return nil, nil }); ran || !errors.Is(err, idemkit.ErrInFlight) {
		t.Fatalf("a duplicate: ran=%v, %v; want ErrInFlight", ran, err)
	}
	if res, err := cl.Finish(ctxb, []byte("v"), nil); err != nil || string(res.Value) != "v" {
		t.Fatalf("Finish: %+v, %v", res, err)
	}
	if res, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) { ran = true; return nil, nil }); ran || err != nil || !res.Replayed || string(res.Value) != "v" {
		t.Fatalf("after Finish: ran=%v, %+v, %v", ran, res, err)
	}
}

// TestFencedSaysWhy: a claim's fenced Finish or Extend says what happened to its record — taken over
// by another attempt, released by an operator, deleted, deleted and claimed again, settled by another
// — as far as a read of the record can tell. Before, every fenced Finish said the lease ran out and
// another attempt took over, and Extend said "fenced by a newer attempt".
func TestFencedSaysWhy(t *testing.T) {
	g, adm, _, clock := realGuard(t, func(o *idemkit.Options) { o.Locker = nil })
	// expired returns the record of call once its lease ran out.
	expired := func(t *testing.T, call idemkit.Call) *idemkit.Record {
		clock.Advance(2 * time.Minute)
		rec, err := adm.Get(ctxb, call.Scope, call.Key)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	purge := func(t *testing.T, call idemkit.Call) {
		if err := adm.Purge(ctxb, expired(t, call), admin.PurgeOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		do   func(t *testing.T, call idemkit.Call, cl *idemkit.Claim)
		want string
	}{
		{"takeover", func(t *testing.T, call idemkit.Call, _ *idemkit.Claim) {
			clock.Advance(2 * time.Minute)
			if cl2, _, err := g.Begin(ctxb, call); err != nil || cl2 == nil {
				t.Fatalf("takeover: %v", err)
			}
		}, "another attempt took over"},
		{"released", func(t *testing.T, call idemkit.Call, _ *idemkit.Claim) {
			if _, err := adm.Release(ctxb, expired(t, call), admin.ReleaseOptions{By: "alice"}); err != nil {
				t.Fatal(err)
			}
		}, "claim released by alice"},
		{"purged", func(t *testing.T, call idemkit.Call, _ *idemkit.Claim) { purge(t, call) }, "deleted"},
		{"purged and claimed again", func(t *testing.T, call idemkit.Call, _ *idemkit.Claim) {
			purge(t, call)
			if cl2, _, err := g.Begin(ctxb, call); err != nil || cl2 == nil {
				t.Fatalf("new claim: %v", err)
			}
		}, "deleted and claimed again"},
		{"settled", func(t *testing.T, _ idemkit.Call, cl *idemkit.Claim) {
			rec := cl.Record()
			if err := g.Settle(ctxb, &rec, []byte("x"), nil); err != nil {
				t.Fatal(err)
			}
		}, "finished by another as SUCCEEDED"},
	}
	for i, c := range cases {
		for _, op := range []string{"finish", "extend"} {
			call := idemkit.Call{Scope: "s", Key: fmt.Sprintf("k%d-%s", i, op)}
			cl, _, err := g.Begin(ctxb, call)
			if err != nil || cl == nil {
				t.Fatalf("Begin: %v", err)
			}
			c.do(t, call, cl)
			if op == "finish" {
				_, err = cl.Finish(ctxb, []byte("v"), nil)
			} else {
				err = cl.Extend(ctxb)
			}
			if !errors.Is(err, idemkit.ErrFenced) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s, %s: %v; want ErrFenced saying %q", c.name, op, err, c.want)
			}
			if c.name != "takeover" && err != nil && strings.Contains(err.Error(), "took over") {
				t.Errorf("%s, %s: %v blames a takeover", c.name, op, err)
			}
		}
	}
}
