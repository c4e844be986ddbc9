package admin_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/record"
)

// TestBusyCommitLeavesNoTransactionOpen: Release checks and writes a claim in a transaction of its
// own. In SQLite's default (rollback journal) mode a COMMIT waits for the readers to finish, and when
// they outlast the busy timeout it fails with SQLITE_BUSY and the transaction stays open; database/sql
// then put the connection back into the pool with it, and the pool's next write ran inside it, never
// committed, while the file stayed locked for every other connection. The failed release must leave
// nothing open.
func TestBusyCommitLeavesNoTransactionOpen(t *testing.T) {
	ctx := context.Background()
	dsn := t.TempDir() + "/busy.db?_pragma=busy_timeout(200)"
	db, err := gorm.Open(sqlite.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(1) // the next write gets the connection the failed COMMIT left
	t.Cleanup(func() { _ = sqlDB.Close() })
	st, err := record.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	stale := &idemkit.Record{Scope: "busy", Key: "k1", Status: idemkit.StatusProcessing, Fence: 1, Owner: "dead",
		LeaseUntil: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour), CreatedAt: now.Add(-2 * time.Minute), UpdatedAt: now.Add(-2 * time.Minute)}
	if err := st.Insert(ctx, stale); err != nil {
		t.Fatal(err)
	}
	rec, err := st.Get(ctx, "busy", "k1")
	if err != nil {
		t.Fatal(err)
	}

	other, err := sql.Open("sqlite", dsn) // another process's connection
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	// A reader holds the file's shared lock, so the release's COMMIT cannot get the exclusive one.
	reader, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reader.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+st.Table()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Release(ctx, rec, admin.ReleaseOptions{By: "test"}); err == nil {
		t.Fatal("the release committed beside an open reader; want SQLITE_BUSY")
	}
	if _, err := reader.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := reader.Close(); err != nil {
		t.Fatal(err)
	}

	next := *stale
	next.Key = "k2"
	if err := st.Insert(ctx, &next); err != nil {
		t.Fatal(err)
	}
	var k2 int
	if err := other.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+st.Table()+" WHERE idem_key = 'k2'").Scan(&k2); err != nil {
		t.Fatalf("another connection cannot read the file after the failed COMMIT (a transaction left open holds its lock): %v", err)
	}
	if k2 != 1 {
		t.Errorf("an Insert after the failed release: %d rows seen by another connection, want 1 (it ran in the transaction left open)", k2)
	}
	got, err := st.Get(ctx, "busy", "k1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != idemkit.StatusProcessing {
		t.Errorf("the claim is %s after a release whose COMMIT failed; want it PROCESSING still", got.Status)
	}
}
