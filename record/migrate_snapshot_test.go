package record

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestMigratePostgresWaitsForOldSnapshots: on PostgreSQL each CREATE INDEX CONCURRENTLY of the
// migration, once built, waits for every transaction of the database holding an older snapshot —
// on any table, not only the record table: a REPEATABLE READ transaction, a running pg_dump. The
// README said only that the primary key swap waits for the transactions open on the table, so a
// migration run beside a backup or a long report seemed hung. It waits, bounded by its context
// alone, writes going on; once the old snapshot is gone the run completes.
func TestMigratePostgresWaitsForOldSnapshots(t *testing.T) {
	db := backends[1].db(t, nil) // PostgreSQL
	s := v1Table(t, db)
	other := testsvc.Name("t_other_")
	must(t, db.Exec("CREATE TABLE "+other+" (x int)").Error)
	testsvc.DropTable(t, db, other)

	// A REPEATABLE READ transaction that read another table only, as pg_dump's does.
	holder := db.Begin(&sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	var n int
	must(t, holder.Raw("SELECT count(*) FROM "+other).Scan(&n).Error)
	ctx, cancel := context.WithTimeout(ctxb, 3*time.Second)
	done := make(chan error, 1)
	go func() { done <- s.Migrate(ctx) }()
	// Writes go on while the build waits.
	time.Sleep(time.Second)
	wctx, wcancel := context.WithTimeout(ctxb, time.Second)
	must(t, s.Insert(wctx, &idemkit.Record{Scope: "s", Key: "during-wait", Status: idemkit.StatusSucceeded, Fence: 1}))
	wcancel()
	err := <-done
	cancel()
	if err == nil {
		holder.Rollback()
		t.Fatal("Migrate completed beside an older snapshot on another table; the README's warning is wrong")
	}
	if v1, verr := s.isV1(ctxb); verr != nil || !v1 {
		t.Fatalf("after the cut-short run: v1 %v, %v; want the v1 table as it was", v1, verr)
	}
	holder.Rollback()

	ctx, cancel = context.WithTimeout(ctxb, 30*time.Second)
	defer cancel()
	must(t, s.Migrate(ctx))
	checkV2Layout(t, s, db)
}
