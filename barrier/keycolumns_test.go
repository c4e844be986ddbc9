package barrier

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// DTM's own DDL of the barrier table (sqls/dtmcli.barrier.*.sql of DTM v1.19), for table %[1]s.
const (
	dtmBarrierMySQL = "CREATE TABLE %[1]s (id bigint(22) PRIMARY KEY AUTO_INCREMENT, trans_type varchar(45) default '', " +
		"gid varchar(128) default '', branch_id varchar(128) default '', op varchar(45) default '', barrier_id varchar(45) default '', " +
		"reason varchar(45) default '' comment 'the branch type who insert this record', create_time datetime DEFAULT now(), " +
		"update_time datetime DEFAULT now(), key(create_time), key(update_time), UNIQUE key(gid, branch_id, op, barrier_id)" +
		") ENGINE = InnoDB DEFAULT CHARSET = utf8mb4"
	dtmBarrierPostgres = "CREATE SEQUENCE %[1]s_seq; CREATE TABLE %[1]s (id bigint NOT NULL DEFAULT NEXTVAL ('%[1]s_seq'), " +
		"trans_type varchar(45) default '', gid varchar(128) default '', branch_id varchar(128) default '', op varchar(45) default '', " +
		"barrier_id varchar(45) default '', reason varchar(45) default '', create_time timestamp(0) with time zone DEFAULT NULL, " +
		"update_time timestamp(0) with time zone DEFAULT NULL, PRIMARY KEY(id), CONSTRAINT uniq_barrier unique(gid, branch_id, op, barrier_id))"
)

// TestGormCreateTableRefusesLooseKeyColumns: a barrier table that exists with a gid, branch_id, op
// or barrier_id column comparing case- or padding-insensitively — DTM's own MySQL DDL (VARCHAR in
// the utf8mb4 default collation), utf8mb4_bin (PAD SPACE), PostgreSQL's CHAR or a nondeterministic
// collation — or too short makes two transactions' branches share barrier rows: the second one's
// branch is taken for a repeated delivery of the first's and never runs. CreateTable (CREATE TABLE
// IF NOT EXISTS) and CheckKeyColumns refuse it, naming the column and the ALTER TABLE that fixes it;
// the shipped table, DTM's PostgreSQL one and the other byte-exact types pass.
func TestGormCreateTableRefusesLooseKeyColumns(t *testing.T) {
	type keyColumnsCase struct {
		name     string
		dtm      bool   // the table made from DTM's DDL, not the shipped one
		from, to string // replaced in the shipped DDL
		column   string // the column CreateTable must refuse; "" when the table is right
		alias    [2]string
	}
	ctx := context.Background()
	for _, d := range dialects[:2] {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t, nil)
			var cases []keyColumnsCase
			if d.name == "mysql" {
				gid := "gid varbinary(512) default ''"
				cases = []keyColumnsCase{
					{name: "shipped"},
					{name: "DTM's DDL", dtm: true, column: "gid", alias: [2]string{"-A", "-a"}},
					{name: "nopad_bin", from: gid, to: "gid varchar(128) COLLATE utf8mb4_nopad_bin default ''"},
					{name: "bin pads", from: gid, to: "gid varchar(128) COLLATE utf8mb4_bin default ''", column: "gid", alias: [2]string{"-s", "-s "}},
					{name: "op general_ci", from: "op varbinary(180) default ''", to: "op varchar(45) COLLATE utf8mb4_general_ci default ''", column: "op"},
					{name: "short", from: gid, to: "gid varbinary(128) default ''", column: "gid"},
				}
			} else {
				coll := testsvc.Name("nondet_")
				if err := db.Exec("CREATE COLLATION " + coll + " (provider = icu, locale = 'und-u-ks-level2', deterministic = false)").Error; err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Exec("DROP COLLATION IF EXISTS " + coll) })
				gid := "gid varchar(128) default ''"
				cases = []keyColumnsCase{
					{name: "shipped"},
					{name: "DTM's DDL", dtm: true},
					{name: "text C", from: gid, to: `gid text COLLATE "C" default ''`},
					{name: "nondeterministic", from: gid, to: "gid varchar(128) COLLATE " + coll + " default ''", column: "gid", alias: [2]string{"-A", "-a"}},
					{name: "char pads", from: gid, to: "gid char(128) default ''", column: "gid", alias: [2]string{"-s", "-s "}},
					{name: "short", from: "branch_id varchar(128) default ''", to: "branch_id varchar(64) default ''", column: "branch_id"},
				}
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					table := freshTableName(t, db)
					g, err := NewGorm(db, &GormOptions{Table: table})
					if err != nil {
						t.Fatal(err)
					}
					if c.dtm {
						if schema, _, ok := strings.Cut(table, "."); ok {
							must(t, db.Exec("CREATE SCHEMA "+schema).Error)
						}
						ddl := map[string]string{"mysql": dtmBarrierMySQL, "postgres": dtmBarrierPostgres}[d.name]
						for stmt := range strings.SplitSeq(fmt.Sprintf(ddl, table), "; ") {
							must(t, db.Exec(stmt).Error)
						}
					} else {
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
					}
					// ran reports whether a saga action of gid ran.
					ran := func(g *Gorm, gid string) bool {
						t.Helper()
						b, err := NewBranch(TransSaga, gid, "01", OpAction)
						must(t, err)
						ran := false
						must(t, g.Transaction(ctx, b, func(*gorm.DB) error { ran = true; return nil }))
						return ran
					}
					base := testsvc.Name("Gid-")
					if c.alias[0] != "" { // the table's fault, shown: another transaction's branch finds the first's rows
						if !ran(g, base+c.alias[0]) || ran(g, base+c.alias[1]) {
							t.Fatalf("on the hand-made table the actions of gids %q and %q did not share their rows", base+c.alias[0], base+c.alias[1])
						}
					}
					err = g.CreateTable(ctx)
					if c.column == "" {
						must(t, err)
						must(t, g.CheckKeyColumns(ctx))
						return
					}
					if err == nil {
						t.Fatalf("CreateTable accepted the table with %s", c.to+map[bool]string{true: "DTM's DDL"}[c.dtm])
					}
					for _, want := range []string{table, "column " + c.column, "ALTER TABLE"} {
						if !strings.Contains(err.Error(), want) {
							t.Errorf("CreateTable = %v, want it to name %q", err, want)
						}
					}
					if err2 := g.CheckKeyColumns(ctx); err2 == nil || err2.Error() != err.Error() {
						t.Errorf("CheckKeyColumns = %v, want %v", err2, err)
					}
					// The fix the error names makes the table right.
					_, fix, _ := strings.Cut(err.Error(), "shipped types: ")
					fix, _, _ = strings.Cut(fix, " (then restart")
					must(t, db.Exec(fix).Error)
					// A new pool: the driver's connections keep statements prepared for the old types.
					g, err = NewGorm(d.open(t, nil), &GormOptions{Table: table})
					must(t, err)
					must(t, g.CreateTable(ctx))
					if c.alias[0] != "" {
						base = testsvc.Name("Gid-")
						if !ran(g, base+c.alias[0]) || !ran(g, base+c.alias[1]) {
							t.Errorf("after the fix the actions of gids %q and %q still share their rows", base+c.alias[0], base+c.alias[1])
						}
					}
				})
			}
		})
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
