package barrier

import (
	"context"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestGormCreateTableRefusesATableWithoutItsUniqueKey: on MySQL/MariaDB the barrier's INSERT IGNORE
// relies on the table's unique key over (gid, branch_id, op, barrier_id) to refuse a repeated row. A
// table that exists without it — the key made a plain index by hand or by a migration tool, a prefix
// of gid, a wider key — stores every delivery anew: a redelivered action ran its business again, and
// a late try ran after its cancel. CREATE TABLE IF NOT EXISTS kept such a table and CreateTable
// accepted it (PostgreSQL and SQLite refuse the insert itself: ON CONFLICT names the key). CreateTable
// and CheckKeyColumns refuse it, naming the ALTER TABLE that adds the key.
func TestGormCreateTableRefusesATableWithoutItsUniqueKey(t *testing.T) {
	ctx := context.Background()
	db := testsvc.MySQL(t, nil)
	const unique = "UNIQUE key(gid, branch_id, op, barrier_id)"
	for _, c := range []struct {
		name, key string
		refused   bool
	}{
		{"shipped", unique, false},
		{"reordered", "UNIQUE key(op, barrier_id, branch_id, gid)", false},
		{"plain index", "key(gid, branch_id, op, barrier_id)", true},
		{"gid prefix", "UNIQUE key(gid(16), branch_id, op, barrier_id)", true},
		{"wider", "UNIQUE key(gid, branch_id, op, barrier_id, trans_type)", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			table := freshTableName(t, db)
			g, err := NewGorm(db, &GormOptions{Table: table})
			must(t, err)
			found := false
			for _, stmt := range g.d.ddl {
				if strings.Contains(stmt, unique) {
					stmt, found = strings.Replace(stmt, unique, c.key, 1), true
				}
				must(t, db.Exec(stmt).Error)
			}
			if !found {
				t.Fatalf("the DDL has no %q", unique)
			}
			runs := 0
			deliver := func(gid string) Outcome {
				t.Helper()
				b, err := NewBranch(TransSaga, gid, "01", OpAction)
				must(t, err)
				out, err := g.TransactionOutcome(ctx, b, func(*gorm.DB) error { runs++; return nil })
				must(t, err)
				return out
			}
			if c.name == "plain index" { // the table's fault, shown
				gid := testsvc.Name("gid-")
				if deliver(gid) != Proceed || deliver(gid) != Proceed || runs != 2 {
					t.Fatalf("on the hand-made table a redelivery did not run the business again")
				}
				must(t, db.Exec("DELETE FROM "+table).Error)
			}
			err = g.CreateTable(ctx)
			if !c.refused {
				must(t, err)
				must(t, g.CheckKeyColumns(ctx))
				return
			}
			if err == nil {
				t.Fatalf("CreateTable accepted the table with %s", c.key)
			}
			for _, want := range []string{table, "unique key", "ALTER TABLE"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("CreateTable = %v, want it to name %q", err, want)
				}
			}
			if err2 := g.CheckKeyColumns(ctx); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("CheckKeyColumns = %v, want %v", err2, err)
			}
			// The fix the error names makes the table right.
			_, fix, _ := strings.Cut(err.Error(), "add it: ")
			must(t, db.Exec(fix).Error)
			must(t, g.CreateTable(ctx))
			runs = 0
			gid := testsvc.Name("gid-")
			if deliver(gid) != Proceed || deliver(gid) != Duplicate || runs != 1 {
				t.Errorf("after the fix a redelivery ran the business again (%d runs)", runs)
			}
		})
	}
}
