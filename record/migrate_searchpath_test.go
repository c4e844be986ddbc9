package record

import (
	"testing"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestMigrateSearchPath: on PostgreSQL an unqualified Options.Table is found through
// search_path by every statement of the Store, but Migrate's v1 check (isV1) looks only in
// current_schema() — the first schema of search_path that exists. With search_path = app, public
// and the v1 table in public (app holding other tables), Migrate reports success and migrates
// nothing: the table stayed v1 (found by a defect hunt).
func TestMigrateSearchPath(t *testing.T) {
	db := backends[1].db(t, nil)
	schema := testsvc.Name("s_")
	must(t, db.Exec("CREATE SCHEMA "+schema).Error)
	t.Cleanup(func() { db.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE") })
	base := v1Table(t, db) // in public
	table := base.q.name

	app := testsvc.PostgresWith(t, nil, " search_path="+schema+",public")
	s, err := New(app, &Options{Table: table})
	must(t, err)
	// The Store works on the table through search_path.
	if _, err := s.Get(ctxb, "s", "k"); err != nil && err.Error() != "idemkit: record not found" {
		t.Logf("Get: %v", err)
	}
	must(t, s.Migrate(ctxb))
	if v1, err := base.isV1(ctxb); err != nil || v1 {
		t.Fatalf("Migrate returned nil, but the table %s the Store works on is still v1 (isV1 = %v, %v)", table, v1, err)
	}
}
