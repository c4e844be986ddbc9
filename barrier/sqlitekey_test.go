package barrier

import (
	"context"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestGormCreateTableRefusesLooseSQLiteKeyColumns: on SQLite a barrier table made by hand whose gid,
// branch_id, op or barrier_id column has a collation other than BINARY (NOCASE, RTRIM) compares the
// unique key loosely, as DTM's MySQL DDL does: gids "Order-A" and "order-a" shared their barrier rows,
// the second transaction's action taken for a repeated delivery of the first's and never run.
// CheckKeyColumns checked nothing on SQLite and CreateTable (CREATE TABLE IF NOT EXISTS) kept such a
// table; both refuse it, naming the column.
func TestGormCreateTableRefusesLooseSQLiteKeyColumns(t *testing.T) {
	ctx := context.Background()
	db := testsvc.SQLite(t, nil)
	for _, c := range []struct {
		name, from, to, column string
		alias                  [2]string
	}{
		{name: "shipped"},
		{"gid nocase", "gid varchar(128) default ''", "gid varchar(128) COLLATE NOCASE default ''", "gid", [2]string{"-A", "-a"}},
		{"gid rtrim", "gid varchar(128) default ''", "gid varchar(128) COLLATE RTRIM default ''", "gid", [2]string{"-s", "-s "}},
		{"op nocase", "op varchar(45) default ''", "op varchar(45) COLLATE NOCASE default ''", "op", [2]string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			table := testsvc.Name("bar_sq_")
			g, err := NewGorm(db, &GormOptions{Table: table})
			must(t, err)
			for _, stmt := range g.d.ddl {
				if c.from != "" && strings.Contains(stmt, c.from) {
					stmt = strings.Replace(stmt, c.from, c.to, 1)
					c.from = ""
				}
				must(t, db.Exec(stmt).Error)
			}
			if c.from != "" {
				t.Fatalf("the DDL has no %q", c.from)
			}
			if c.alias[0] != "" { // the table's fault, shown
				base := testsvc.Name("Gid-")
				ran := 0
				for _, gid := range []string{base + c.alias[0], base + c.alias[1]} {
					b, _ := NewBranch(TransSaga, gid, "01", OpAction)
					must(t, g.Transaction(ctx, b, func(*gorm.DB) error { ran++; return nil }))
				}
				if ran != 1 {
					t.Fatalf("on the hand-made table the actions of two gids did not share their rows")
				}
			}
			err = g.CreateTable(ctx)
			if c.column == "" {
				must(t, err)
				return
			}
			if err == nil {
				t.Fatalf("CreateTable accepted the table with %s", c.to)
			}
			for _, want := range []string{table, "column " + c.column} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("CreateTable = %v, want it to name %q", err, want)
				}
			}
			if err2 := g.CheckKeyColumns(ctx); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("CheckKeyColumns = %v, want %v", err2, err)
			}
		})
	}
}
