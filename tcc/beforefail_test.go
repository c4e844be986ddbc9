package tcc_test

import (
	"context"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/txstatus"
)

// TestFailedBeforeHookRollsItsRowBack: the README's Before hook inserts the order (PENDING) under the
// gid, and then fails (a second statement the database refuses) or panics. Nothing starts, the record
// is rolled back (FAILED, the key free again) — but no Rollback hook ran for the gid, the one thing
// that moves its order out of PENDING, and no Reconciler ever looks at a FAILED record: the order of a
// transaction that never started stayed PENDING for ever, as every other never-started gid's does not
// (a refused start, a lost lock, a caller gone). The Rollback hook now runs for it.
func TestFailedBeforeHookRollsItsRowBack(t *testing.T) {
	for _, how := range []string{"fails", "panics"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			k := newBank(t)
			orders, limits := testsvc.Name("orders_"), testsvc.Name("limits_")
			testsvc.DropTable(t, k.db, orders)
			testsvc.DropTable(t, k.db, limits)
			for _, q := range []string{
				"CREATE TABLE " + orders + " (gid varchar(64) PRIMARY KEY, status varchar(16) NOT NULL)",
				"CREATE TABLE " + limits + " (user_id int PRIMARY KEY)",
				"INSERT INTO " + limits + " (user_id) VALUES (7)",
			} {
				if err := k.db.Exec(q).Error; err != nil {
					t.Fatal(err)
				}
			}
			setStatus := func(ctx context.Context, gid, status string) error {
				return k.db.WithContext(ctx).Exec("UPDATE "+orders+" SET status = ? WHERE gid = ? AND status = 'PENDING'", status, gid).Error
			}
			var gid string
			g := *k.global
			g.Lifecycle = &hooks.Lifecycle{
				Guard: k.guard,
				Before: hooks.BeforeTransactionFunc(func(ctx context.Context, tx *hooks.Txn) error {
					gid = tx.GID
					if err := k.db.WithContext(ctx).Exec("INSERT INTO "+orders+" (gid, status) VALUES (?, 'PENDING')", tx.GID).Error; err != nil {
						return err
					}
					if how == "panics" {
						panic("nil map")
					}
					// The user's second statement, refused: user 7 already has a limit row.
					return k.db.WithContext(ctx).Exec("INSERT INTO " + limits + " (user_id) VALUES (7)").Error
				}),
				OnCommit: hooks.CommitFunc(func(ctx context.Context, tx *hooks.Txn, _ []byte) error {
					return setStatus(ctx, tx.GID, "PAID")
				}),
				OnRollback: hooks.RollbackFunc(func(ctx context.Context, tx *hooks.Txn, _ error) error {
					return setStatus(ctx, tx.GID, "FAILED")
				}),
			}
			c := newCall()
			func() {
				defer func() {
					if v := recover(); (v != nil) != (how == "panics") {
						t.Fatalf("recovered %v", v)
					}
				}()
				out, err := g.Run(ctxb, k.runParams(c))
				if err == nil || out.GID != "" {
					t.Fatalf("Run = %+v, %v; want the Before hook's error and nothing started", out, err)
				}
			}()
			if k.tryCount() != 0 {
				t.Fatal("a try ran")
			}
			if rec := k.record(t, c); rec.Status != idemkit.StatusFailed || rec.GID != gid {
				t.Fatalf("record %s gid %q, want FAILED under %q", rec.Status, rec.GID, gid)
			}
			if tr, err := k.srv.Query(ctxb, gid); err != nil || tr.Status != "" {
				t.Fatalf("DTM holds %s: %+v, %v", gid, tr, err)
			}
			var status string
			if err := k.db.Raw("SELECT status FROM "+orders+" WHERE gid = ?", gid).Scan(&status).Error; err != nil {
				t.Fatal(err)
			}
			if status != "FAILED" {
				t.Fatalf("the order of %s, which never started, is %s: want FAILED (the Rollback hook must run for it)", gid, status)
			}
			// The key is free: a retry, once the limit is lifted, runs a new TCC.
			if err := k.db.Exec("DELETE FROM " + limits).Error; err != nil {
				t.Fatal(err)
			}
			g.Lifecycle.Before = hooks.BeforeTransactionFunc(func(ctx context.Context, tx *hooks.Txn) error {
				return k.db.WithContext(ctx).Exec("INSERT INTO "+orders+" (gid, status) VALUES (?, 'PENDING')", tx.GID).Error
			})
			again, err := g.Run(ctxb, k.runParams(c))
			if err != nil || again.Status != txstatus.Succeed || again.GID == gid {
				t.Fatalf("retry = %+v, %v", again, err)
			}
			k.checkBalances(t, amount)
		})
	}
}
