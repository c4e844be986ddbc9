package record

import (
	"context"
	"testing"
	"time"
)

// TestMigrateMySQLStopsWithItsContext: README and Store.Migrate say the migration is bounded by its
// context. On MySQL/MariaDB the driver gives up on the ALTER TABLE when the context ends (it closes
// the connection), but the server went on rebuilding the table, and migrated it seconds later — after
// Migrate had reported the failure, and with the rebuild's closing metadata lock (on Galera, its
// cluster-wide write stall) still to come. The statement is now killed on the server (KILL QUERY)
// when the context ends: the table stays v1 and the migration can be run again.
func TestMigrateMySQLStopsWithItsContext(t *testing.T) {
	db := backends[0].db(t, nil) // MySQL/MariaDB
	s := v1Table(t, db)
	table := s.q.quoted
	// A table whose rebuild takes seconds: 2^17 records.
	must(t, db.Exec("INSERT INTO "+table+" (scope, idem_key, status, error, response) VALUES ('s', 'k1', 'SUCCEEDED', '', REPEAT('x', 300))").Error)
	for range 17 {
		must(t, db.Exec("INSERT INTO "+table+" (scope, idem_key, status, error, response) "+
			"SELECT scope, CONCAT('k', id + (SELECT MAX(id) FROM (SELECT id FROM "+table+") m)), status, error, response FROM "+table).Error)
	}
	var rows int
	must(t, db.Raw("SELECT count(*) FROM "+table).Scan(&rows).Error)

	alters := func() (n int) {
		must(t, db.Raw("SELECT count(*) FROM information_schema.processlist WHERE info LIKE ?", "ALTER TABLE "+table+"%").Scan(&n).Error)
		return n
	}
	// Cut short once the server runs the rebuild (not after a fixed time, which a fast server could
	// beat: the test would then show nothing).
	ctx, cancel := context.WithCancel(ctxb)
	errc := make(chan error, 1)
	go func() { errc <- s.Migrate(ctx) }()
	for wait := time.Now().Add(30 * time.Second); alters() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(wait) {
			cancel()
			t.Fatalf("the server never ran the migration's ALTER TABLE (Migrate: %v)", <-errc)
		}
	}
	cancel()
	err := <-errc
	if err == nil {
		t.Fatal("Migrate returned nil though its context ended during the rebuild")
	}
	deadline := time.Now().Add(2 * time.Second)
	for alters() > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := alters(); n > 0 {
		t.Fatalf("Migrate returned %q, yet the server still rebuilds the table 2s later", err)
	}
	if v1, err := s.isV1(ctxb); err != nil || !v1 {
		t.Fatalf("after a migration cut short by its context: v1 %v, %v; want the v1 table as it was", v1, err)
	}

	must(t, s.Migrate(ctxb))
	checkV2Layout(t, s, db)
	var after int
	must(t, db.Raw("SELECT count(*) FROM "+table).Scan(&after).Error)
	if after != rows {
		t.Fatalf("%d records after the migration, %d before", after, rows)
	}
}
