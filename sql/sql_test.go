package sql

import (
	"io/fs"
	"reflect"
	"strings"
	"testing"
)

func TestRecords(t *testing.T) {
	for _, d := range []string{"mysql", "MariaDB", "postgres", "postgresql", "pgx", "sqlite", "sqlite3"} {
		ddl, err := Records(d)
		if err != nil {
			t.Fatalf("Records(%q): %v", d, err)
		}
		if !strings.Contains(ddl, "CREATE TABLE IF NOT EXISTS "+RecordsTable+" (") {
			t.Errorf("Records(%q) does not create %s", d, RecordsTable)
		}
		for _, col := range []string{"scope", "idem_key", "status", "fence", "owner", "fingerprint", "gid", "branch_id",
			"response", "error", "lease_until", "expires_at", "created_at", "updated_at"} {
			if !strings.Contains(ddl, "\n  "+col+" ") {
				t.Errorf("Records(%q) lacks column %s", d, col)
			}
		}
		for _, stmt := range Statements(ddl) {
			if !strings.Contains(stmt, "IF NOT EXISTS") {
				t.Errorf("Records(%q): statement is not idempotent: %s", d, stmt)
			}
		}
	}
	for _, d := range []string{"", "oracle", "sqlserver", "mysql;"} {
		if _, err := Records(d); err == nil {
			t.Errorf("Records(%q) succeeded", d)
		}
	}
	if _, err := File("nosuchtable", "mysql"); err == nil {
		t.Error("File of a missing table succeeded")
	}
}

func TestFSHoldsEverySQLFile(t *testing.T) {
	names, err := fs.Glob(FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"records_mysql.sql", "records_postgres.sql", "records_sqlite.sql"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("FS lacks %s (has %v)", want, names)
		}
	}
}

func TestStatements(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"-- only a comment; with a semicolon\n", nil},
		{"A;B;", []string{"A", "B"}},
		{"A -- note; not a split\n  x;\n\n;  B", []string{"A \n  x", "B"}},
		{"INSERT INTO t VALUES ('a;b', '--c');", []string{"INSERT INTO t VALUES ('a;b', '--c')"}},
		{"x DEFAULT '', -- it's fine\ny;", []string{"x DEFAULT '', \ny"}},
		// $$ bodies are kept whole, comments and semicolons included.
		{"DO $$ BEGIN -- c; d\n  x; y; END $$;\nZ;", []string{"DO $$ BEGIN -- c; d\n  x; y; END $$", "Z"}},
		{"SELECT '$$'; W;", []string{"SELECT '$$'", "W"}},
	} {
		if got := Statements(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Statements(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, d := range []string{"mysql", "postgres", "sqlite"} {
		ddl, _ := Records(d)
		stmts := Statements(ddl)
		want := 2 // the table and its one secondary index
		if d == "mysql" {
			want = 1 // the index inline
		}
		if len(stmts) != want {
			t.Errorf("%s: %d statements, want %d: %q", d, len(stmts), want, stmts)
		}
		for _, s := range stmts {
			if strings.Contains(s, "--") || strings.HasSuffix(s, ";") {
				t.Errorf("%s: statement keeps a comment or semicolon: %q", d, s)
			}
		}
	}
}

func TestMigration(t *testing.T) {
	for d, want := range map[string]int{"mysql": 2, "postgres": 7, "sqlite": 7} {
		text, err := Migration(d)
		if err != nil {
			t.Fatalf("Migration(%q): %v", d, err)
		}
		stmts := Statements(text)
		if len(stmts) != want {
			t.Errorf("%s: %d statements, want %d: %q", d, len(stmts), want, stmts)
		}
		if !strings.Contains(text, RecordsTable) {
			t.Errorf("%s: the migration does not name %s", d, RecordsTable)
		}
	}
}
