package barrier

import (
	"strings"
	"testing"

	idemsql "github.com/idemkit/idemkit/sql"
)

// TestDDLMatchesFiles: the DDL CreateTable runs for the default table is, statement for statement, the
// barrier_<dialect>.sql file of package sql, so the two cannot drift apart.
func TestDDLMatchesFiles(t *testing.T) {
	norm := func(s string) string {
		s = strings.NewReplacer("`", "", `"`, "").Replace(s)
		return strings.Join(strings.Fields(s), " ")
	}
	for _, name := range []string{"mysql", "postgres", "sqlite"} {
		d, err := newDialect(name, "")
		if err != nil {
			t.Fatal(err)
		}
		file, err := idemsql.File("barrier", name)
		if err != nil {
			t.Fatal(err)
		}
		want := idemsql.Statements(file)
		if len(want) != len(d.ddl) {
			t.Fatalf("%s: %d statements in the file, %d in the code", name, len(want), len(d.ddl))
		}
		for i := range want {
			if norm(want[i]) != norm(d.ddl[i]) {
				t.Errorf("%s statement %d differs:\nfile: %s\ncode: %s", name, i, norm(want[i]), norm(d.ddl[i]))
			}
		}
	}
}

// TestDDLRenamed: for another table the default names are all renamed and columns are left alone.
func TestDDLRenamed(t *testing.T) {
	for _, name := range []string{"mysql", "postgres", "sqlite"} {
		for _, table := range []string{"shop.branch_barrier", "branch_barrier"} {
			d, err := newDialect(name, table)
			if err != nil {
				t.Fatal(err)
			}
			all := strings.Join(d.ddl, "\n")
			if strings.Contains(all, "dtm_barrier") || strings.Count(all, "barrier_id") != 2 ||
				name != "mysql" && !strings.Contains(all, "branch_barrier_create_time") ||
				!strings.Contains(all, "branch_barrier"+q(name)+" (") {
				t.Errorf("%s %s:\n%s", name, table, all)
			}
			if strings.Contains(table, ".") != strings.Contains(all, "shop") {
				t.Errorf("%s %s: schema statement wrong:\n%s", name, table, all)
			}
		}
	}
}

func q(dialect string) string {
	if dialect == "mysql" {
		return "`"
	}
	return `"`
}
