package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/idemtest"
)

// TestGIDFilterIsExact: a filter on a gid selects the records of that gid only. On MySQL/MariaDB the
// gid column's collation (utf8mb4_bin, PAD SPACE) compared "g1" equal to "g1 ", so `idemctl list
// --gid g1` and `idemctl dtm g1` showed another transaction's records as g1's, and `purge --gid g1`
// deleted them.
func TestGIDFilterIsExact(t *testing.T) {
	for name, open := range dialects {
		t.Run(name, func(t *testing.T) {
			db := open(t, nil)
			st, tbl := table(t, db)
			clock := idemtest.NewClock()
			now := clock.Now()
			ctx := context.Background()
			for i, gid := range []string{"g1", "g1 ", "g1  ", "G1"} {
				must(t, st.Insert(ctx, &idemkit.Record{Scope: "s", Key: string(rune('a' + i)), Status: idemkit.StatusProcessing, Fence: 1,
					Owner: "o", GID: gid, LeaseUntil: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}))
			}
			adm, err := admin.New(db, &admin.Options{Table: tbl, Now: clock.Now})
			must(t, err)
			for _, gid := range []string{"g1", "g1 "} {
				list, err := adm.List(ctx, admin.Filter{GID: gid})
				must(t, err)
				if len(list) != 1 || list[0].GID != gid {
					var got []string
					for _, e := range list {
						got = append(got, e.GID)
					}
					t.Fatalf("List(GID %q) = gids %q, want only %q", gid, got, gid)
				}
				n, err := adm.Count(ctx, admin.Filter{GID: gid})
				must(t, err)
				if n != 1 {
					t.Fatalf("Count(GID %q) = %d, want 1", gid, n)
				}
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
