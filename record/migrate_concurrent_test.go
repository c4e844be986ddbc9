package record

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// TestMigrateConcurrently: replicas that each run Store.Migrate as they start (as they may run
// CreateTable) migrate a populated v1 table once between them, and every Migrate returns nil. They
// failed — all but one on MariaDB ("Can't DROP COLUMN id": the ALTER of another had run), and on
// PostgreSQL with deadlocks between the CREATE INDEX CONCURRENTLY statements, or with an index
// dropped under another run (found by a defect hunt).
func TestMigrateConcurrently(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		db := b.db(t, nil)
		s := v1Table(t, db)
		now := time.Now()
		for i := range 300 {
			must(t, s.Insert(ctxb, &idemkit.Record{Scope: "POST /orders", Key: fmt.Sprint("k", i), Status: idemkit.StatusSucceeded,
				Fence: 1, Response: []byte("ok"), ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}))
		}
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() { errs[i] = s.Migrate(ctxb) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("Migrate %d of %d run at once: %v", i+1, len(errs), err)
			}
		}
		if v1, err := s.isV1(ctxb); err != nil || v1 {
			t.Fatalf("after the runs the table is v1: %v (%v)", v1, err)
		}
		if left, err := s.v1Leftovers(ctxb); err != nil || left {
			t.Fatalf("after the runs the table keeps v1's indexes: %v (%v)", left, err)
		}
		var n int64
		must(t, db.Table(s.q.name).Count(&n).Error)
		if n != 300 {
			t.Fatalf("%d records after the runs, want 300", n)
		}
		rec, err := s.Get(ctxb, "POST /orders", "k299")
		if err != nil || string(rec.Response) != "ok" {
			t.Fatalf("a record after the runs: %+v, %v", rec, err)
		}
	})
}
