package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
)

// TestDamagedLockValueIsNoLock: a damaged lock value (lock.ErrDamagedLock: no deadline or no token)
// under a record's key is reported by Redis as Damaged, with its TTL, instead of failing the read;
// Purge of a finished record, which asks Redis whether an attempt holds the key first, refused
// (its read failed) and now deletes the record and the value, as lock.Locker.Forget does.
func TestDamagedLockValueIsNoLock(t *testing.T) {
	db := testsvc.SQLite(t, nil)
	rdb, prefix := cleanRedis(t)
	st, tbl := table(t, db)
	adm, err := admin.New(db, &admin.Options{Table: tbl, Redis: rdb, RedisPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lk := lock.New(rdb, &lock.Options{Prefix: prefix})
	g, err := idemkit.New(st, &idemkit.Options{Locker: lk})
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "s", Key: "k"}
	if _, err := g.Do(ctx, call, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	ad, err := g.Address(call.Scope, call.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, lk.Key(ad.LockKey), "L:no-deadline", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	s, err := adm.Redis(ctx, ad.Scope, ad.Key)
	if err != nil || !s.Damaged || s.Locked || s.Cached || s.DamagedTTL <= 0 || s.DamagedTTL > time.Hour {
		t.Fatalf("Redis over a damaged lock value = %+v, %v; want it Damaged, with its TTL", s, err)
	}
	rec, err := adm.Get(ctx, call.Scope, call.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.Purge(ctx, rec, admin.PurgeOptions{}); err != nil {
		t.Fatalf("Purge over a damaged lock value: %v", err)
	}
	if n, _ := rdb.Exists(ctx, lk.Key(ad.LockKey)).Result(); n != 0 {
		t.Fatal("Purge left the damaged lock value")
	}
	ran := false
	if _, err := g.Do(ctx, call, func(context.Context) ([]byte, error) { ran = true; return []byte("v"), nil }); err != nil || !ran {
		t.Fatalf("after the purge: %v, ran %v; want a run", err, ran)
	}
}
