package admin_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/record"
)

// TestReleaseAndPurgeWaitForASQLiteWriter: a release or purge of a stuck claim reads the record, then
// writes it, in a transaction of its own. On SQLite, a transaction that has read cannot write while
// another connection holds the write lock, nor once another wrote after its read (SQLITE_BUSY at once,
// whatever the busy timeout): beside an application writing to the same file (idemctl opens an
// existing database with a busy timeout, nothing else), the release or purge failed with "database is
// locked". It must wait for the writer, as any write does for the busy timeout, and then succeed. In
// WAL mode (the recommended one) and in the default rollback-journal mode.
func TestReleaseAndPurgeWaitForASQLiteWriter(t *testing.T) {
	for _, journal := range []string{"WAL", "DELETE"} {
		for _, op := range []string{"release", "purge"} {
			t.Run(journal+"/"+op, func(t *testing.T) {
				ctx := context.Background()
				path := t.TempDir() + "/app.db"
				app, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode("+journal+")")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = app.Close() })
				// The operator's connection, opened as idemctl opens a sqlite:// database.
				db, err := gorm.Open(sqlite.Open("file:"+path+"?_pragma=busy_timeout(5000)&mode=rwc"), &gorm.Config{Logger: logger.Discard})
				if err != nil {
					t.Fatal(err)
				}
				sqlDB, err := db.DB()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sqlDB.Close() })
				st, err := record.New(db, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := st.CreateTable(ctx); err != nil {
					t.Fatal(err)
				}
				now := time.Now()
				if err := st.Insert(ctx, &idemkit.Record{Scope: "s", Key: "stuck", Status: idemkit.StatusProcessing, Fence: 1, Owner: "dead",
					LeaseUntil: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour), CreatedAt: now.Add(-2 * time.Minute), UpdatedAt: now.Add(-2 * time.Minute)}); err != nil {
					t.Fatal(err)
				}
				adm, err := admin.New(db, nil)
				if err != nil {
					t.Fatal(err)
				}
				rec, err := adm.Get(ctx, "s", "stuck")
				if err != nil {
					t.Fatal(err)
				}

				// The application writes another key in a transaction that holds the write lock for a
				// while, as its business transactions do.
				w, err := app.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if _, err := w.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
					t.Fatal(err)
				}
				if _, err := w.ExecContext(ctx, "INSERT INTO "+st.Table()+" (scope, idem_key, status, fence, owner) VALUES ('s', 'app', 'SUCCEEDED', 1, '')"); err != nil {
					t.Fatal(err)
				}
				committed := make(chan error, 1)
				time.AfterFunc(300*time.Millisecond, func() {
					_, err := w.ExecContext(ctx, "COMMIT")
					committed <- err
				})

				if op == "release" {
					_, err = adm.Release(ctx, rec, admin.ReleaseOptions{By: "test"})
				} else {
					err = adm.Purge(ctx, rec, admin.PurgeOptions{})
				}
				if err != nil {
					t.Fatalf("%s beside the application's write transaction: %v", op, err)
				}
				if err := <-committed; err != nil {
					t.Fatalf("the application's commit: %v", err)
				}
				got, err := st.Get(ctx, "s", "stuck")
				switch {
				case op == "release" && (err != nil || got.Status != idemkit.StatusFailed || got.Fence != 2):
					t.Fatalf("after the release: %+v, %v; want FAILED at fence 2", got, err)
				case op == "purge" && !errors.Is(err, idemkit.ErrNotFound):
					t.Fatalf("after the purge: %+v, %v; want no record", got, err)
				}
				if _, err := st.Get(ctx, "s", "app"); err != nil {
					t.Fatalf("the application's record: %v", err)
				}
			})
		}
	}
}
