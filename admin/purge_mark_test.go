package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
)

// TestPurgeRefusesARunningMark: Mark mode writes its record SUCCEEDED before its function runs. A
// purge of that record while the function runs is refused unless forced: without Redis nothing else
// would keep a duplicate from running beside the function (a mark written less than a lease ago may
// be running); with Redis the function's lock would, but releasing it as the function ends caches
// the result again, so duplicates were answered from the cache for a record that no longer existed.
// Once the function ended (and, without Redis, a lease passed) the purge goes through and the key
// runs again.
func TestPurgeRefusesARunningMark(t *testing.T) {
	for _, withRedis := range []bool{false, true} {
		name := "without Redis"
		if withRedis {
			name = "with Redis"
		}
		t.Run(name, func(t *testing.T) {
			db := testsvc.MySQL(t, nil)
			st, tbl := table(t, db)
			clock := idemtest.NewClock()
			gopts := &idemkit.Options{Lease: time.Minute, Now: clock.Now}
			aopts := &admin.Options{Table: tbl, Lease: time.Minute, Now: clock.Now}
			if withRedis {
				rdb, prefix := cleanRedis(t)
				gopts.Locker = lock.New(rdb, &lock.Options{Prefix: prefix})
				aopts.Redis, aopts.RedisPrefix = rdb, prefix
			}
			g, err := idemkit.New(st, gopts)
			if err != nil {
				t.Fatal(err)
			}
			adm, err := admin.New(db, aopts)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			call := idemkit.Call{Scope: "m", Key: "k"}
			finish := markRunning(t, g, call)
			rec, err := adm.Get(ctx, call.Scope, call.Key)
			if err != nil {
				t.Fatal(err)
			}
			perr := adm.Purge(ctx, rec, admin.PurgeOptions{})
			ran := false
			derr := g.Mark(ctx, call, func(context.Context) error { ran = true; return nil })
			finish()
			if ran {
				t.Fatalf("a duplicate ran beside the running mark (purge: %v)", perr)
			}
			_, gerr := adm.Get(ctx, call.Scope, call.Key)
			if withRedis && (errors.Is(gerr, idemkit.ErrNotFound) || errors.Is(gerr, admin.ErrUnknownScope)) {
				ad, err := adm.Address(call.Scope, call.Key)
				if err != nil {
					t.Fatal(err)
				}
				if s, err := adm.Redis(ctx, ad.Scope, ad.Key); err != nil || s.Cached {
					t.Errorf("the record is purged, but Redis caches it again: %+v, %v", s, err)
				}
			}
			if !errors.Is(perr, admin.ErrRefused) {
				t.Fatalf("purge of a running mark: %v (a duplicate then: %v); want ErrRefused", perr, derr)
			}

			// The function ended: the purge goes through (without Redis, once a lease has passed).
			rec, err = adm.Get(ctx, call.Scope, call.Key)
			if err != nil {
				t.Fatal(err)
			}
			if !withRedis {
				if err := adm.Purge(ctx, rec, admin.PurgeOptions{}); !errors.Is(err, admin.ErrRefused) {
					t.Fatalf("purge of a mark written less than a lease ago: %v, want ErrRefused", err)
				}
				clock.Advance(time.Minute)
			}
			if err := adm.Purge(ctx, rec, admin.PurgeOptions{}); err != nil {
				t.Fatalf("purge of a mark whose function ended: %v", err)
			}
			if err := g.Mark(ctx, call, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
				t.Fatalf("after the purge: ran=%v, %v", ran, err)
			}
		})
	}
}
