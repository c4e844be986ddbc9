package record

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
	idemsql "github.com/idemkit/idemkit/sql"
)

// TestMigratePostgresRerunAfterFailedIndexBuild: the PostgreSQL migration file says "the file
// is idempotent, so a failed run can be run again" and Store.Migrate says "every step can be run
// again". A CREATE UNIQUE INDEX CONCURRENTLY that fails (here: lock_timeout while a writer's
// transaction is open; equally a cancelled context or statement_timeout) leaves an INVALID index
// behind. The next run's "CREATE ... IF NOT EXISTS" skips it, and the DO block cannot use it as the
// primary key: the migration fails on every later run until someone drops the index by hand.
func TestMigratePostgresRerunAfterFailedIndexBuild(t *testing.T) {
	db := backends[1].db(t, nil) // PostgreSQL
	s := v1Table(t, db)
	table := s.q.name
	must(t, db.Exec("INSERT INTO "+table+" (scope, idem_key, status, fence, owner) VALUES ('s', 'k', 'SUCCEEDED', 1, 'o')").Error)

	// A second pool whose sessions give up on lock waits after 300ms (as an operator's short
	// statement_timeout or a deadline on Migrate's context would).
	short := testsvc.PostgresWith(t, nil, " lock_timeout=300")
	ms, err := New(short, &Options{Table: table})
	must(t, err)

	// A writer's transaction open during the index build: CREATE INDEX CONCURRENTLY waits for it.
	blocker := db.Begin()
	must(t, blocker.Exec("INSERT INTO "+table+" (scope, idem_key, status, fence, owner) VALUES ('s', 'k2', 'SUCCEEDED', 1, 'o')").Error)
	err = ms.Migrate(ctxb)
	blocker.Rollback()
	if err == nil {
		t.Fatal("the first migration succeeded although a writer held the table; the test did not provoke a failure")
	}
	t.Logf("first run failed as provoked: %v", err)

	// The failure is gone: run the migration again, as the file and Migrate's doc say one can.
	ctx, cancel := context.WithTimeout(ctxb, 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("re-running the migration after a failed run: %v\ninvalid indexes left on the table: %s", err, strings.Join(invalidIndexes(t, db, s), ", "))
	}
	checkV2Layout(t, s, db)
}

// TestMigratePostgresRerunAfterCancelledMigrate: the same with the failure an operator meets
// most: Migrate's context ends (a deadline) while CREATE INDEX CONCURRENTLY waits for a writer.
func TestMigratePostgresRerunAfterCancelledMigrate(t *testing.T) {
	db := backends[1].db(t, nil) // PostgreSQL
	s := v1Table(t, db)
	table := s.q.name
	blocker := db.Begin()
	must(t, blocker.Exec("INSERT INTO "+table+" (scope, idem_key, status, fence, owner) VALUES ('s', 'k2', 'SUCCEEDED', 1, 'o')").Error)
	ctx, cancel := context.WithTimeout(ctxb, 500*time.Millisecond)
	err := s.Migrate(ctx)
	cancel()
	time.Sleep(500 * time.Millisecond) // let the server notice the cancel
	blocker.Rollback()
	if err == nil {
		t.Fatal("the first migration succeeded; the test did not provoke a failure")
	}
	t.Logf("first run: %v", err)
	ctx, cancel = context.WithTimeout(ctxb, 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("re-running the migration after a cancelled run: %v", err)
	}
	checkV2Layout(t, s, db)
}

// TestMigratePostgresRerunRebuildsInvalidIndex: a run that failed in the file's second statement
// (CREATE INDEX CONCURRENTLY of the (status, expires_at) index: a lock timeout here, equally a
// cancelled context) leaves that index INVALID. The next Migrate skips it ("IF NOT EXISTS"), swaps
// the primary key and reports success: the v2 table's one secondary index is unusable (the sweeper,
// the stale-claim scan and the reconciler read the whole table), and nothing says so.
func TestMigratePostgresRerunRebuildsInvalidIndex(t *testing.T) {
	db := backends[1].db(t, nil) // PostgreSQL
	s := v1Table(t, db)
	// A run built the primary key's index, then failed building the (status, expires_at) one while a
	// writer's transaction was open.
	failMigrationAt(t, db, s, func(s string) bool {
		return strings.HasPrefix(s, "CREATE INDEX CONCURRENTLY") && strings.Contains(s, "_status_expires_idx")
	})

	must(t, s.Migrate(ctxb)) // run again
	checkV2Layout(t, s, db)
	if invalid := invalidIndexes(t, db, s); len(invalid) > 0 {
		t.Fatalf("Migrate reported success, but the migrated table's indexes %v are INVALID (never used by the planner)", invalid)
	}
}

// invalidIndexes returns the names of s's table's INVALID indexes (PostgreSQL).
func invalidIndexes(t *testing.T, db *gorm.DB, s *Store) []string {
	t.Helper()
	var names []string
	must(t, db.Raw("SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = ?::regclass AND NOT i.indisvalid", s.q.quoted).Scan(&names).Error)
	return names
}

// failMigrationAt runs the PostgreSQL migration of s's table on db's server up to its first statement
// at which returns true, and runs that one with a short lock_timeout while a writer's transaction on
// the table is open, so that it fails, as a run cut short there would.
func failMigrationAt(t *testing.T, db *gorm.DB, s *Store, at func(stmt string) bool) {
	t.Helper()
	short := testsvc.PostgresWith(t, nil, " lock_timeout=300")
	ms, err := New(short, &Options{Table: s.q.name})
	must(t, err)
	stmts := idemsql.Statements(ms.q.renderDDL(mustMigration(t)))
	i := slices.IndexFunc(stmts, at)
	for _, stmt := range stmts[:i] {
		must(t, short.Exec(stmt).Error)
	}
	blocker := db.Begin()
	must(t, blocker.Exec("INSERT INTO "+s.q.name+" (scope, idem_key, status, fence, owner) VALUES ('s', 'k2', 'SUCCEEDED', 1, 'o')").Error)
	err = short.Exec(stmts[i]).Error
	blocker.Rollback()
	if err == nil {
		t.Fatalf("%.60s... succeeded; the test did not provoke a failure", stmts[i])
	}
	t.Logf("the run failed at: %.60s...: %v", stmts[i], err)
}

func mustMigration(t *testing.T) string {
	text, err := idemsql.Migration(dialectPostgres)
	must(t, err)
	return text
}

// TestMigratePostgresRerunAfterFailedIndexDrop: a run that failed after the primary key swap, in
// one of the file's closing DROP INDEX CONCURRENTLY statements (here: lock_timeout while a writer's
// transaction is open; equally a cancelled context), leaves the v1 indexes on the table. The table
// has no id column any more, so the next Migrate took it for a v2 table and did nothing: it reported
// success and the v1 indexes stayed for good (every write kept maintaining three secondary indexes).
func TestMigratePostgresRerunAfterFailedIndexDrop(t *testing.T) {
	db := backends[1].db(t, nil) // PostgreSQL
	s := v1Table(t, db)
	must(t, db.Exec("INSERT INTO "+s.q.name+" (scope, idem_key, status, fence, owner) VALUES ('s', 'k', 'SUCCEEDED', 1, 'o')").Error)
	failMigrationAt(t, db, s, func(s string) bool { return strings.HasPrefix(s, "DROP INDEX CONCURRENTLY") })

	ctx, cancel := context.WithTimeout(ctxb, 30*time.Second)
	defer cancel()
	must(t, s.Migrate(ctx)) // run again
	checkV2Layout(t, s, db)
	if invalid := invalidIndexes(t, db, s); len(invalid) > 0 {
		t.Fatalf("Migrate reported success, but INVALID indexes %v are left on the table", invalid)
	}
}
