package record

import (
	"context"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// fillV1 inserts n records into the v1 table of s through db (the same statement on MySQL/MariaDB and
// PostgreSQL: a cross join of digits), so that rebuilding its indexes takes a while.
func fillV1(t *testing.T, db *gorm.DB, s *Store, n int) {
	t.Helper()
	const digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 " +
		"UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	must(t, db.Exec("INSERT INTO "+s.q.quoted+" (scope, idem_key, status, fence, owner, fingerprint, error, expires_at) "+
		"SELECT 'POST /orders', CONCAT('bulk-', a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d), 'SUCCEEDED', 1, '', "+
		"CONCAT('fp-', a.d, b.d, c.d, e.d, f.d), '', 4102444800000 FROM "+
		digits+" a, "+digits+" b, "+digits+" c, "+digits+" e, "+digits+" f WHERE a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d < ?", n).Error)
}

// TestMigrateIgnoresTheSessionsStatementTimeout: Migrate runs on a connection of the application's
// pool, whose DSN may bound every statement (PostgreSQL statement_timeout, MariaDB
// max_statement_time: a common guard for a service's queries). The migration's index builds and
// table rebuild take as long as the table's size asks, far beyond such a bound on a real table: every
// run failed the same way ("canceling statement due to statement timeout", "Query execution was
// interrupted"), so the README's "a run that failed ... can be run again" never came true. Migrate
// is bounded by its context, not by the session's statement timeout.
func TestMigrateIgnoresTheSessionsStatementTimeout(t *testing.T) {
	for _, b := range []struct {
		name string
		db   func(t *testing.T) *gorm.DB
	}{
		{"MariaDB", func(t *testing.T) *gorm.DB { return testsvc.MySQLWith(t, nil, "&max_statement_time=0.05") }},
		{"PostgreSQL", func(t *testing.T) *gorm.DB { return testsvc.PostgresWith(t, nil, " statement_timeout=50") }},
	} {
		t.Run(b.name, func(t *testing.T) {
			db := backends[map[string]int{"MariaDB": 0, "PostgreSQL": 1}[b.name]].db(t, nil)
			s := v1Table(t, db)
			fillV1(t, db, s, 100_000)
			bounded, err := New(b.db(t), &Options{Table: s.q.name})
			must(t, err)
			ctx, cancel := context.WithTimeout(ctxb, 2*time.Minute)
			defer cancel()
			for run := 1; run <= 2; run++ {
				err := bounded.Migrate(ctx)
				if err == nil {
					break
				}
				if run == 2 {
					t.Fatalf("Migrate on a pool whose sessions bound statements failed twice: %v", err)
				}
				t.Logf("run %d: %v", run, err)
			}
			checkV2Layout(t, s, db)
			var n int
			must(t, db.Raw("SELECT count(*) FROM "+s.q.quoted).Row().Scan(&n))
			if n != 100_000 {
				t.Fatalf("%d records after the migration, want 100000", n)
			}
		})
	}
}
