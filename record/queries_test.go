package record

import (
	"strings"
	"testing"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

func TestValidateTable(t *testing.T) {
	long := strings.Repeat("a", maxIdentLen)
	for _, name := range []string{"idemkit_records", "_t", "T1", "a_B_9", "s.t", "_s._t", long, long + "." + long} {
		if _, _, err := validateTable(dialectMySQL, name); err != nil {
			t.Errorf("validateTable(%q) = %v, want nil", name, err)
		}
	}
	for _, name := range []string{
		"", "1t", "t-1", "t 1", "t;DROP TABLE users", "t; DROP TABLE users; --", "t--", "t/*x*/", "t'", `t"`, "`t`",
		`"t"`, "[t]", "t)", "t(", "a.b.c", ".t", "t.", "s..t", "ä", "tä", "t\x00", "t\n", "t\t", " t", "t ", "t,u",
		"t OR 1=1", "$1", "?", "@t", "t.*", long + "a", "s." + long + "a", long + "a.t", "t\u200b",
	} {
		if _, _, err := validateTable(dialectMySQL, name); err == nil {
			t.Errorf("validateTable(%q) = nil, want an error", name)
		}
	}
}

func TestNewRejectsBadTables(t *testing.T) {
	db := openSQLiteMemory(t)
	for _, name := range []string{"x; DROP TABLE idemkit_records", "a.b.c", "1x", strings.Repeat("x", 65), `x"`, "x`"} {
		if s, err := New(db, &Options{Table: name}); err == nil {
			t.Errorf("New(Table %q) = %v, nil; want an error", name, s)
		}
	}
	opts := &Options{}
	s, err := New(db, opts)
	must(t, err)
	if s.Table() != DefaultTable || opts.Table != "" {
		t.Fatalf("Table() = %q, caller's Table = %q; want %q and unchanged", s.Table(), opts.Table, DefaultTable)
	}
	if _, err := New(nil, nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	if _, err := New(db.Session(&gorm.Session{DryRun: true}), nil); err == nil {
		t.Fatal("New on a DryRun session succeeded")
	}
}

// openSQLiteMemory opens a private in-memory SQLite database (one connection) for tests that need a
// gorm.DB but no table.
func openSQLiteMemory(t testing.TB) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(sqlite.Open("file::memory:"), &gorm.Config{Logger: logger.Discard})
	must(t, err)
	sqlDB, err := db.DB()
	must(t, err)
	sqlDB.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

func TestRebind(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "",
		"SELECT 1":                   "SELECT 1",
		"a = ? AND b IN (?,?,?)":     "a = $1 AND b IN ($2,$3,$4)",
		"?????????????":              "$1$2$3$4$5$6$7$8$9$10$11$12$13",
		"x = 'PROCESSING' AND y = ?": "x = 'PROCESSING' AND y = $1",
	} {
		if got := rebind(in); got != want {
			t.Errorf("rebind(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestQueriesPlaceholders(t *testing.T) {
	q := buildQueries(dialectPostgres, "", "t")
	for _, s := range []string{q.insert, q.get, q.getLocked, q.update, q.delete, q.delExpired, q.recover} {
		if strings.Contains(s, "?") || !strings.Contains(s, "$1") {
			t.Errorf("PostgreSQL text %q still has '?' placeholders", s)
		}
	}
	if !strings.HasSuffix(q.insert, "ON CONFLICT (scope, idem_key) DO NOTHING") {
		t.Errorf("PostgreSQL insert = %q", q.insert)
	}
	my := buildQueries(dialectMySQL, "", "t")
	if !strings.HasSuffix(my.insert, "ON DUPLICATE KEY UPDATE scope = scope") || !strings.HasPrefix(my.insert, "INSERT INTO `t` (") {
		t.Errorf("MySQL insert = %q", my.insert)
	}
	if lite := buildQueries(dialectSQLite, "", "t"); strings.Contains(lite.getLocked, "FOR UPDATE") {
		t.Errorf("SQLite locking read = %q: SQLite has no FOR UPDATE", lite.getLocked)
	}
	// No statement names the v1 id column: the Store runs on a v1 table during an upgrade.
	for _, d := range []string{dialectMySQL, dialectPostgres, dialectSQLite} {
		q := buildQueries(d, "", "t")
		for _, s := range []string{q.insert, q.get, q.getLocked, q.update, q.confirm, q.delete, q.delExpired, q.recover, q.pendingPfx} {
			if strings.Contains(s, " id ") || strings.Contains(s, " id,") || strings.Contains(s, "(id") {
				t.Errorf("%s: %q names the id column", d, s)
			}
		}
	}
	if got := inList("x IN (", 3); got != "x IN (?,?,?)" {
		t.Errorf("inList = %q", got)
	}
}

func TestRenderDDL(t *testing.T) {
	const ddl = "CREATE TABLE IF NOT EXISTS idemkit_records (id INT);\n" +
		"CREATE INDEX IF NOT EXISTS idemkit_records_expires_at_idx ON idemkit_records (expires_at);\n" +
		"-- idemkit_recordsx idemkit_records2 stay\n"
	for _, tc := range []struct {
		dialect, schema, table, want string
	}{
		{dialectPostgres, "", "rec", "CREATE TABLE IF NOT EXISTS \"rec\" (id INT);\n" +
			"CREATE INDEX IF NOT EXISTS \"rec_expires_at_idx\" ON \"rec\" (expires_at);\n-- idemkit_recordsx idemkit_records2 stay\n"},
		{dialectPostgres, "app", "rec", "CREATE TABLE IF NOT EXISTS \"app\".\"rec\" (id INT);\n" +
			"CREATE INDEX IF NOT EXISTS \"rec_expires_at_idx\" ON \"app\".\"rec\" (expires_at);\n-- idemkit_recordsx idemkit_records2 stay\n"},
		{dialectSQLite, "main", "rec", "CREATE TABLE IF NOT EXISTS \"main\".\"rec\" (id INT);\n" +
			"CREATE INDEX IF NOT EXISTS \"main\".\"rec_expires_at_idx\" ON \"rec\" (expires_at);\n-- idemkit_recordsx idemkit_records2 stay\n"},
		{dialectMySQL, "db", "rec", "CREATE TABLE IF NOT EXISTS `db`.`rec` (id INT);\n" +
			"CREATE INDEX IF NOT EXISTS `rec_expires_at_idx` ON `db`.`rec` (expires_at);\n-- idemkit_recordsx idemkit_records2 stay\n"},
	} {
		q := buildQueries(tc.dialect, tc.schema, tc.table)
		if got := q.renderDDL(ddl); got != tc.want {
			t.Errorf("%s %s.%s:\n got %q\nwant %q", tc.dialect, tc.schema, tc.table, got, tc.want)
		}
	}
}

func TestIndexName(t *testing.T) {
	if got := indexName("rec", "_expires_at_idx"); got != "rec_expires_at_idx" {
		t.Fatalf("indexName = %q", got)
	}
	a, b := strings.Repeat("a", 64), strings.Repeat("a", 63)+"b"
	seen := map[string]bool{}
	for _, table := range []string{a, b} {
		for _, suffix := range []string{"_expires_at_idx", "_status_lease_idx"} {
			n := indexName(table, suffix)
			if len(n) > maxIndexName || !strings.HasSuffix(n, suffix) || seen[n] {
				t.Fatalf("indexName(%q, %q) = %q: too long, lost its suffix or collides", table, suffix, n)
			}
			seen[n] = true
		}
	}
}
