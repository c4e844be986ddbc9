package barrier

import (
	"context"
	"errors"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestGormCreateTableRefusesANonTransactionalTable: the barrier rows must commit or roll back with the
// business's writes. A MySQL/MariaDB barrier table in an engine without transactions (MyISAM, Aria,
// MEMORY: ENGINE= in a DDL by hand, a default_storage_engine changed) keeps its rows when the local
// transaction rolls back: an action whose business failed left its row, and the redelivery was taken
// for a duplicate and answered done, the business never run. CREATE TABLE IF NOT EXISTS kept such a
// table and CreateTable accepted it; CreateTable and CheckKeyColumns refuse it, naming the ALTER TABLE
// that moves it to InnoDB.
func TestGormCreateTableRefusesANonTransactionalTable(t *testing.T) {
	ctx := context.Background()
	db := testsvc.MySQL(t, nil)
	for _, engine := range []string{"InnoDB", "MyISAM", "Aria"} {
		t.Run(engine, func(t *testing.T) {
			table := freshTableName(t, db)
			g, err := NewGorm(db, &GormOptions{Table: table})
			must(t, err)
			const shipped = "ENGINE = InnoDB"
			found := false
			for _, stmt := range g.d.ddl {
				if strings.Contains(stmt, shipped) {
					stmt, found = strings.Replace(stmt, shipped, "ENGINE = "+engine, 1), true
				}
				must(t, db.Exec(stmt).Error)
			}
			if !found {
				t.Fatalf("the DDL has no %q", shipped)
			}
			runs := 0
			deliver := func(gid string, fail error) (Outcome, error) {
				b, err := NewBranch(TransSaga, gid, "01", OpAction)
				must(t, err)
				return g.TransactionOutcome(ctx, b, func(*gorm.DB) error { runs++; return fail })
			}
			transient := errors.New("transient")
			if engine == "MyISAM" { // the table's fault, shown
				gid := testsvc.Name("gid-")
				if _, err := deliver(gid, transient); !errors.Is(err, transient) {
					t.Fatal(err)
				}
				if out, err := deliver(gid, nil); err != nil || out != Duplicate || runs != 1 {
					t.Fatalf("on the MyISAM table the redelivery after a failed business: %s, %v (%d runs)", out, err, runs)
				}
			}
			err = g.CreateTable(ctx)
			if engine == "InnoDB" {
				must(t, err)
				return
			}
			if err == nil {
				t.Fatalf("CreateTable accepted the %s table", engine)
			}
			for _, want := range []string{table, engine, "ALTER TABLE"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("CreateTable = %v, want it to name %q", err, want)
				}
			}
			if err2 := g.CheckKeyColumns(ctx); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("CheckKeyColumns = %v, want %v", err2, err)
			}
			_, fix, _ := strings.Cut(err.Error(), "move it: ")
			must(t, db.Exec(fix).Error)
			must(t, g.CreateTable(ctx))
			gid := testsvc.Name("gid-")
			runs = 0
			if _, err := deliver(gid, transient); !errors.Is(err, transient) {
				t.Fatal(err)
			}
			if out, err := deliver(gid, nil); err != nil || out != Proceed || runs != 2 {
				t.Errorf("after the fix the redelivery after a failed business: %s, %v (%d runs); want proceed", out, err, runs)
			}
		})
	}
}
