package record

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/testsvc"
	idemsql "github.com/idemkit/idemkit/sql"
)

// TestDDLFilesAgreeWithStore creates the table by running the sql/ file itself (renamed by plain text
// replacement, not by CreateTable's code), then writes, reads, updates and deletes through the Store and
// checks the raw columns.
func TestDDLFilesAgreeWithStore(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		db := b.db(t, nil)
		ddl, err := idemsql.Records(db.Dialector.Name())
		must(t, err)
		table := testsvc.Name("t_ddl_")
		testsvc.DropTable(t, db, table)
		for _, stmt := range idemsql.Statements(strings.ReplaceAll(ddl, idemsql.RecordsTable, table)) {
			must(t, db.Exec(stmt).Error)
		}
		s, err := New(db, &Options{Table: table})
		must(t, err)
		must(t, s.CreateTable(ctxb)) // IF NOT EXISTS: a no-op on the file's table

		now := time.Date(2031, 2, 3, 4, 5, 6, 789_000_000, time.UTC)
		rec := &idemkit.Record{
			Scope: "POST /orders", Key: "k1", Status: idemkit.StatusProcessing, Fence: 1, Owner: "tok",
			Fingerprint: "fp", GID: "g", BranchID: "b", Response: []byte{0, 1, 0}, Error: "e",
			LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now,
		}
		must(t, s.Insert(ctxb, rec))
		got, err := s.Get(ctxb, rec.Scope, rec.Key)
		must(t, err)
		idemtest.RequireSameRecord(t, rec, got)

		// The times are BIGINT Unix milliseconds; the response is binary.
		var lease, expires, created, updated, fence int64
		var resp []byte
		var status string
		row := db.Raw("SELECT status, fence, response, lease_until, expires_at, created_at, updated_at FROM "+table+
			" WHERE scope = ? AND idem_key = ?", rec.Scope, rec.Key).Row()
		must(t, row.Scan(&status, &fence, &resp, &lease, &expires, &created, &updated))
		if status != "PROCESSING" || fence != 1 || !bytes.Equal(resp, rec.Response) || lease != rec.LeaseUntil.UnixMilli() ||
			expires != rec.ExpiresAt.UnixMilli() || created != now.UnixMilli() || updated != now.UnixMilli() {
			t.Fatalf("raw columns %s %d %v %d %d %d %d", status, fence, resp, lease, expires, created, updated)
		}

		next := *rec
		next.Status, next.Response, next.Error, next.UpdatedAt = idemkit.StatusSucceeded, []byte("done"), "", now.Add(time.Minute)
		must(t, s.Update(ctxb, &next, rec.Version()))
		got, err = s.Get(ctxb, rec.Scope, rec.Key)
		must(t, err)
		idemtest.RequireSameRecord(t, &next, got)
		if err := s.Insert(ctxb, rec); err != idemkit.ErrExists {
			t.Fatalf("duplicate Insert = %v, want ErrExists (the unique index)", err)
		}
		must(t, s.Delete(ctxb, rec.Scope, rec.Key, next.Version()))
		if _, err := s.Get(ctxb, rec.Scope, rec.Key); err != idemkit.ErrNotFound {
			t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
		}
	})
}

// TestKeysCompareExactly: keys that differ in case or trailing spaces are different keys on every
// database (MySQL's utf8mb4 collations would merge them; the DDL uses VARBINARY there).
func TestKeysCompareExactly(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := setup(t, b)
		now := time.Now()
		keys := []string{"key", "KEY", "key ", "kéy", "ke\u0301y"}
		for _, k := range keys {
			must(t, s.Insert(ctxb, &idemkit.Record{Scope: "s", Key: k, Status: idemkit.StatusSucceeded, Fence: 1,
				Owner: "o", Response: []byte(k), CreatedAt: now, UpdatedAt: now}))
		}
		for _, k := range keys {
			got, err := s.Get(ctxb, "s", k)
			must(t, err)
			if got.Key != k || string(got.Response) != k {
				t.Fatalf("Get(%q) returned key %q response %q", k, got.Key, got.Response)
			}
		}
		for _, sc := range []string{"S", "s "} {
			if _, err := s.Get(ctxb, sc, "key"); err != idemkit.ErrNotFound {
				t.Fatalf("Get(scope %q) = %v, want ErrNotFound", sc, err)
			}
		}
	})
}

func TestCreateTableQualifiedAndIdempotent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		db := b.db(t, nil)
		var schema string
		switch db.Dialector.Name() {
		case dialectMySQL:
			schema = testsvc.Database
		case dialectSQLite:
			schema = "main"
		case dialectPostgres:
			schema = testsvc.Name("s_")
			must(t, db.Exec("CREATE SCHEMA "+schema).Error)
			t.Cleanup(func() { db.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE") })
		}
		name := schema + "." + testsvc.Name("t_q_")
		testsvc.DropTable(t, db, name)
		s, err := New(db, &Options{Table: name})
		must(t, err)
		must(t, s.CreateTable(ctxb))
		must(t, s.CreateTable(ctxb))
		rec := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusProcessing, Fence: 1, Owner: "o"}
		must(t, s.Insert(ctxb, rec))
		if err := s.Insert(ctxb, rec); err != idemkit.ErrExists {
			t.Fatalf("duplicate = %v", err)
		}
		got, err := s.Get(ctxb, "s", "k")
		must(t, err)
		idemtest.RequireSameRecord(t, rec, got)
	})
}

// TestCreateTableLongNames: on PostgreSQL index names live in the schema and are cut at 63 bytes; two
// long table names sharing a prefix must still get their own indexes.
func TestCreateTableLongNames(t *testing.T) {
	db := backends[1].db(t, nil)
	prefix := testsvc.Name("t_long_")
	var tables []string
	for _, c := range []string{"a", "b"} {
		table := prefix + strings.Repeat("x", 62-len(prefix)) + c // 63 bytes: not truncated itself
		tables = append(tables, table)
		testsvc.DropTable(t, db, table)
		s, err := New(db, &Options{Table: table})
		must(t, err)
		must(t, s.CreateTable(ctxb))
	}
	for _, table := range tables {
		var n int
		must(t, db.Raw("SELECT count(*) FROM pg_indexes WHERE tablename = ?", table).Row().Scan(&n))
		if n != 2 { // primary key (scope, idem_key), (status, expires_at)
			t.Errorf("%s has %d indexes, want 2", table, n)
		}
	}
}

// TestCreateTableConcurrently runs CreateTable for one new table from several goroutines at once, as
// replicas starting together do: every call succeeds. On PostgreSQL the losers of the race of CREATE
// TABLE IF NOT EXISTS (and of CREATE INDEX IF NOT EXISTS) failed on the system catalog's unique index,
// an error CreateTable then reported as idemkit.ErrExists ("record exists").
func TestCreateTableConcurrently(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		db := b.db(t, nil)
		for round := range 8 {
			table := testsvc.Name("t_cc_")
			testsvc.DropTable(t, db, table)
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, err := New(db, &Options{Table: table})
					if err == nil {
						err = s.CreateTable(ctxb)
					}
					errs[i] = err
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatalf("round %d: CreateTable beside others: %v", round, err)
				}
			}
			s, err := New(db, &Options{Table: table})
			must(t, err)
			rec := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusProcessing, Fence: 1, Owner: "o"}
			must(t, s.Insert(ctxb, rec))
		}
	})
}

// TestCreateTableBesideAnOpenWriter runs CreateTable, as every process does at its start, on a table
// that exists (v2, and v1 during a rolling upgrade) while a transaction that wrote to it is open: it
// returns at once. On PostgreSQL its CREATE INDEX IF NOT EXISTS waited for a SHARE lock on the table
// behind that transaction — and every later write to the table queued behind it — even when the
// index existed; on a v1 table it built v2's index there, blocking writes for the build.
func TestCreateTableBesideAnOpenWriter(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		db := b.db(t, nil)
		if b.name == "SQLite" {
			// A process's first statements run on new connections. (An SQLite connection that last
			// read the schema before another one created the table compiles CREATE TABLE IF NOT
			// EXISTS as a write, which waits for the writer.)
			sqlDB, err := db.DB()
			must(t, err)
			sqlDB.SetMaxIdleConns(0)
		}
		for _, layout := range []string{"v2", "v1"} {
			t.Run(layout, func(t *testing.T) {
				var s *Store
				if layout == "v1" {
					s = v1Table(t, db)
				} else {
					s = newTable(t, db)
				}
				indexes := countIndexes(t, s, db)
				tx := db.Begin()
				must(t, tx.Error)
				defer tx.Rollback()
				must(t, s.WithTx(tx).Insert(ctxb, &idemkit.Record{Scope: "s", Key: "open", Status: idemkit.StatusProcessing, Fence: 1, Owner: "o"}))

				ctx, cancel := context.WithTimeout(ctxb, 3*time.Second)
				defer cancel()
				start := time.Now()
				if err := s.CreateTable(ctx); err != nil {
					t.Fatalf("CreateTable beside a transaction that wrote to the table: %v (after %s)", err, time.Since(start).Round(time.Millisecond))
				}
				must(t, tx.Rollback().Error)
				if n := countIndexes(t, s, db); n != indexes {
					t.Fatalf("CreateTable on an existing %s table: %d indexes, had %d", layout, n, indexes)
				}
			})
		}
	})
}

// countIndexes returns how many indexes s's table has.
func countIndexes(t *testing.T, s *Store, db *gorm.DB) (n int) {
	t.Helper()
	switch s.Dialect() {
	case dialectMySQL:
		must(t, db.Raw("SELECT count(DISTINCT index_name) FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ?", s.q.table).Row().Scan(&n))
	case dialectPostgres:
		must(t, db.Raw("SELECT count(*) FROM pg_index WHERE indrelid = ?::regclass", s.q.quoted).Row().Scan(&n))
	default:
		must(t, db.Raw("SELECT count(*) FROM pragma_index_list(?)", s.q.table).Row().Scan(&n))
	}
	return n
}

// TestPostgresRefusesTableNamesItWouldCut: PostgreSQL cuts identifiers at 63 bytes, quoted ones too,
// so a Store on a 64-byte table name worked on the table named by its first 63 bytes: another
// application's Store on that shorter name shared its records, and one client's request was answered
// with another's result. New refuses a name part PostgreSQL would cut; MySQL (64) and SQLite keep theirs.
func TestPostgresRefusesTableNamesItWouldCut(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		db := b.db(t, nil)
		prefix := testsvc.Name("t_cut_")
		long := prefix + strings.Repeat("x", 64-len(prefix))
		for _, name := range []string{long, long + ".t", "idemkit_x." + long} {
			if b.name == "SQLite" && strings.Contains(name, ".") {
				continue // a schema on SQLite is an attached database
			}
			s, err := New(db, &Options{Table: name})
			if b.name != "PostgreSQL" {
				if err != nil {
					t.Errorf("New(%q) = %v; want it accepted (64 bytes fit)", name, err)
				}
				continue
			}
			if err == nil {
				testsvc.DropTable(t, db, long[:63])
				must(t, s.CreateTable(ctxb))
				other, err := New(db, &Options{Table: long[:63]})
				must(t, err)
				must(t, s.Insert(ctxb, &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusSucceeded, Response: []byte("mine")}))
				rec, err := other.Get(ctxb, "s", "k")
				t.Fatalf("New(%q) accepted a name PostgreSQL cuts to %q; the Store on that name reads its record: %v, %v", name, long[:63], rec, err)
			}
			if !strings.Contains(err.Error(), "63") {
				t.Errorf("New(%q) = %v; want an error naming PostgreSQL's limit, 63 bytes", name, err)
			}
		}
	})
}
