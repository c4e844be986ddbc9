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
