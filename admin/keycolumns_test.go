package admin_test

import (
	"context"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/internal/testsvc"
	idemsql "github.com/idemkit/idemkit/sql"
)

// TestCheckRefusesLooseKeyColumns: a record table made by hand with a case-insensitive idem_key
// (MariaDB utf8mb4_general_ci, PostgreSQL's citext-like nondeterministic collation) makes keys like
// "k1" and "K1 " share one record. Check, which idemctl runs before every command, refuses it naming
// the column and the fix; the shipped table passes.
func TestCheckRefusesLooseKeyColumns(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		open func(testing.TB, *gorm.Config) *gorm.DB
		key  string // the hand-made idem_key column; %s: a collation the test creates
	}{
		{"MariaDB", testsvc.MySQL, "idem_key VARCHAR(128) COLLATE utf8mb4_general_ci NOT NULL"},
		{"PostgreSQL", testsvc.Postgres, "idem_key VARCHAR(128) COLLATE %s NOT NULL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := c.open(t, nil)
			st, tbl := table(t, db) // the shipped table
			adm, err := admin.New(db, &admin.Options{Table: tbl})
			if err != nil {
				t.Fatal(err)
			}
			if err := adm.Check(ctx); err != nil {
				t.Fatalf("Check of the shipped table: %v", err)
			}
			key := c.key
			if strings.Contains(key, "%s") {
				coll := testsvc.Name("nondet_")
				if err := db.Exec("CREATE COLLATION " + coll + " (provider = icu, locale = 'und-u-ks-level2', deterministic = false)").Error; err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Exec("DROP COLLATION IF EXISTS " + coll) })
				key = strings.Replace(key, "%s", coll, 1)
			}
			loose := testsvc.Name("t_loose_")
			testsvc.DropTable(t, db, loose)
			ddl, err := st.DDL()
			if err != nil {
				t.Fatal(err)
			}
			ddl = strings.ReplaceAll(ddl, tbl, loose)
			from := map[string]string{"mysql": "idem_key    VARBINARY(128) NOT NULL", "postgres": "idem_key    VARCHAR(128) NOT NULL"}[st.Dialect()]
			if !strings.Contains(ddl, from) {
				t.Fatalf("the DDL has no %q", from)
			}
			for _, stmt := range idemsql.Statements(strings.Replace(ddl, from, key, 1)) {
				if err := db.Exec(stmt).Error; err != nil {
					t.Fatal(err)
				}
			}
			adm, err = admin.New(db, &admin.Options{Table: loose})
			if err != nil {
				t.Fatal(err)
			}
			err = adm.Check(ctx)
			if err == nil || !strings.Contains(err.Error(), "column idem_key") || !strings.Contains(err.Error(), "ALTER TABLE") {
				t.Fatalf("Check of a table with %s = %v; want an error naming idem_key and the ALTER TABLE", key, err)
			}
		})
	}
}
