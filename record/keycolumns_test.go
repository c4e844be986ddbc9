package record

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	idemsql "github.com/idemkit/idemkit/sql"
)

// keyColumnsCase is a record table made by hand: the shipped DDL (or v1's) with a key column's
// type replaced.
type keyColumnsCase struct {
	name     string
	v1       bool
	from, to string // replaced in the DDL: the column's name and type as the file spells them
	column   string // the column CreateTable must refuse; "" when the table is right
	alias    string // a key other than "k1" the table takes for it (shows the table is wrong)
}

// TestCreateTableRefusesLooseKeyColumns: a record table that exists with scope or idem_key columns
// comparing case- or padding-insensitively (MariaDB's utf8mb4 collations, utf8mb4_bin too;
// PostgreSQL's CHAR and nondeterministic collations) or too short makes different keys share one
// record. CreateTable and CheckKeyColumns refuse it, naming the column and the ALTER TABLE that
// fixes it; the shipped table, v1's and the other byte-exact types pass.
func TestCreateTableRefusesLooseKeyColumns(t *testing.T) {
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			db := b.db(t, nil)
			var cases []keyColumnsCase
			if b.name == "MariaDB" {
				key, scope := "idem_key    VARBINARY(128)", "scope       VARBINARY(128)"
				cases = []keyColumnsCase{
					{name: "shipped"},
					{name: "v1", v1: true},
					{name: "nopad_bin", from: key, to: "idem_key VARCHAR(128) COLLATE utf8mb4_nopad_bin"},
					{name: "general_ci", from: key, to: "idem_key VARCHAR(128) COLLATE utf8mb4_general_ci", column: "idem_key", alias: "K1 "},
					{name: "unicode_ci scope", from: scope, to: "scope VARCHAR(128) COLLATE utf8mb4_unicode_ci", column: "scope"},
					{name: "v1 unicode_ci", v1: true, from: key, to: "idem_key VARCHAR(128) COLLATE utf8mb4_unicode_ci", column: "idem_key", alias: "K1"},
					{name: "bin pads", from: key, to: "idem_key VARCHAR(128) COLLATE utf8mb4_bin", column: "idem_key", alias: "k1 "},
					{name: "binary pads", from: key, to: "idem_key BINARY(128)", column: "idem_key"},
					{name: "short", from: key, to: "idem_key VARBINARY(64)", column: "idem_key"},
				}
			} else {
				coll := testsvc.Name("nondet_")
				must(t, db.Exec("CREATE COLLATION "+coll+" (provider = icu, locale = 'und-u-ks-level2', deterministic = false)").Error)
				t.Cleanup(func() { db.Exec("DROP COLLATION IF EXISTS " + coll) })
				key := "idem_key    VARCHAR(128)"
				cases = []keyColumnsCase{
					{name: "shipped"},
					{name: "v1", v1: true},
					{name: "text C", from: key, to: `idem_key TEXT COLLATE "C"`},
					{name: "nondeterministic", from: key, to: "idem_key VARCHAR(128) COLLATE " + coll, column: "idem_key", alias: "K1"},
					{name: "v1 nondeterministic", v1: true, from: "scope       VARCHAR(128)", to: "scope VARCHAR(128) COLLATE " + coll, column: "scope"},
					{name: "char pads", from: key, to: "idem_key CHAR(128)", column: "idem_key", alias: "k1 "},
					{name: "short", from: key, to: "idem_key VARCHAR(64)", column: "idem_key"},
				}
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					table := testsvc.Name("t_keycol_")
					s, err := New(db, &Options{Table: table})
					must(t, err)
					testsvc.DropTable(t, db, table)
					ddl, err := idemsql.Records(s.Dialect())
					must(t, err)
					if c.v1 {
						ddl = map[string]string{dialectMySQL: v1MySQL, dialectPostgres: v1Postgres}[s.Dialect()]
					}
					if c.from != "" {
						if !strings.Contains(ddl, c.from) {
							t.Fatalf("the DDL has no %q", c.from)
						}
						ddl = strings.Replace(ddl, c.from, c.to, 1)
					}
					for _, stmt := range idemsql.Statements(s.q.renderDDL(ddl)) {
						must(t, db.Exec(stmt).Error)
					}
					if c.alias != "" { // the table's fault, shown: another key finds k1's record
						must(t, s.Insert(ctxb, &idemkit.Record{Scope: "s", Key: "k1", Status: idemkit.StatusSucceeded, Fence: 1}))
						if _, err := s.Get(ctxb, "s", c.alias); err != nil {
							t.Fatalf("Get(%q) on the hand-made table = %v, want k1's record", c.alias, err)
						}
					}
					err = s.CreateTable(ctxb)
					if c.column == "" {
						must(t, err)
						must(t, s.CheckKeyColumns(ctxb))
						return
					}
					if err == nil {
						t.Fatalf("CreateTable accepted the table with %s", c.to)
					}
					for _, want := range []string{table, "column " + c.column, "ALTER TABLE"} {
						if !strings.Contains(err.Error(), want) {
							t.Errorf("CreateTable = %v, want it to name %q", err, want)
						}
					}
					if err2 := s.CheckKeyColumns(ctxb); err2 == nil || err2.Error() != err.Error() {
						t.Errorf("CheckKeyColumns = %v, want %v", err2, err)
					}
					// The fix the error names makes the table right.
					_, fix, _ := strings.Cut(err.Error(), "shipped types: ")
					fix, _, _ = strings.Cut(fix, " (then restart")
					if c.alias != "" {
						must(t, db.Exec(fix).Error)
						// A new pool: the driver's connections keep statements prepared for the old types.
						s, err := New(b.db(t, nil), &Options{Table: table})
						must(t, err)
						must(t, s.CreateTable(ctxb))
						if _, err := s.Get(ctxb, "s", c.alias); !errors.Is(err, idemkit.ErrNotFound) {
							t.Errorf("Get(%q) after the fix = %v, want ErrNotFound", c.alias, err)
						}
					}
				})
			}
		})
	}
}
