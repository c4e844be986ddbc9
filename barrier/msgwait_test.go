package barrier

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestQueryPreparedWaitsForTheLocalTransaction: DTM's back-check of a 2-phase message arrives while
// the message's local transaction is still open (the publisher is slow between its prepare and its
// commit). QueryPrepared waits for it on the row's lock and answers its outcome: committed, or
// rolled back for good. On a PostgreSQL whose default_transaction_isolation is REPEATABLE READ or
// SERIALIZABLE its insert failed instead, once the local transaction committed, with a serialization
// failure (40001: the row is not in its statement's snapshot), and the back-check answered an error.
func TestQueryPreparedWaitsForTheLocalTransaction(t *testing.T) {
	for _, c := range []struct {
		name string
		open func(t testing.TB) *gorm.DB
	}{
		{"mysql", func(t testing.TB) *gorm.DB { return testsvc.MySQL(t, nil) }},
		{"postgres", func(t testing.TB) *gorm.DB { return testsvc.Postgres(t, nil) }},
		{"postgres-repeatable-read", func(t testing.TB) *gorm.DB {
			return testsvc.PostgresWith(t, nil, " options='-c default_transaction_isolation=repeatable\\ read'")
		}},
		{"postgres-serializable", func(t testing.TB) *gorm.DB {
			return testsvc.PostgresWith(t, nil, " options='-c default_transaction_isolation=serializable'")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := c.open(t)
			g := newGormTable(t, db)
			ctx := context.Background()
			for _, commit := range []bool{true, false} {
				gid := testsvc.Name("gid-")
				tx := db.Begin()
				b, err := MsgBranch(gid)
				if err != nil {
					t.Fatal(err)
				}
				if out, err := g.Enter(ctx, tx, b); err != nil || out != Proceed {
					t.Fatalf("local transaction: %s, %v", out, err)
				}
				checked := make(chan error, 1)
				go func() { checked <- g.QueryPrepared(ctx, gid) }()
				waitLockWaits(t, db, g, 1)
				end, want := tx.Commit, error(nil)
				if !commit {
					end, want = tx.Rollback, ErrMsgRolledBack
				}
				if err := end().Error; err != nil {
					t.Fatal(err)
				}
				if err := <-checked; !errors.Is(err, want) {
					t.Fatalf("back-check while the local transaction was open (committed: %v): %v, want %v", commit, err, want)
				}
			}
		})
	}
}
