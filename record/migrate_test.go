package record

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/testsvc"
	idemsql "github.com/idemkit/idemkit/sql"
)

// The v1 table DDL, as idemkit v1 shipped it in sql/records_<dialect>.sql.
var (
	//go:embed testdata/records_v1_mysql.sql
	v1MySQL string
	//go:embed testdata/records_v1_postgres.sql
	v1Postgres string
	//go:embed testdata/records_v1_sqlite.sql
	v1SQLite string
)

// v1Table creates a v1 record table on db and returns a (v2) Store over it.
func v1Table(t *testing.T, db *gorm.DB) *Store {
	t.Helper()
	table := testsvc.Name("t_v1_")
	s, err := New(db, &Options{Table: table})
	must(t, err)
	testsvc.DropTable(t, db, table)
	ddl := map[string]string{dialectMySQL: v1MySQL, dialectPostgres: v1Postgres, dialectSQLite: v1SQLite}[s.Dialect()]
	for _, stmt := range idemsql.Statements(s.q.renderDDL(ddl)) {
		must(t, db.Exec(stmt).Error)
	}
	return s
}

// migrationCase is a record written before the migration and what a Guard must do with it after.
type migrationCase struct {
	key   string
	swept bool                                // checked after the sweeper's pass, the others before
	rec   func(now time.Time) *idemkit.Record // nil: written by the Guard (see populate)
	check func(t *testing.T, m *migrationFixture, key string)
}

type migrationFixture struct {
	s     *Store
	db    *gorm.DB
	clock *idemtest.Clock
	g     *idemkit.Guard
}

const migrationScope = "POST /orders"

func (m *migrationFixture) call(key string) idemkit.Call {
	return idemkit.Call{Scope: migrationScope, Key: key}
}

// mustNotRun is a guarded function for calls that must not run.
func mustNotRun(context.Context) ([]byte, error) { return nil, errors.New("ran, but must not") }

// TestMigrateV1ToV2: a populated v1 table — every status, gid records, expired records, lapsed leases,
// long hashed keys — is served by this version before the migration (the rolling-deploy window),
// migrated by Store.Migrate while writers keep going (MySQL/MariaDB and PostgreSQL), and every record
// behaves afterwards as before: replays, rejections, in flight, takeover with fence+1, pending
// listing, sweeper.
func TestMigrateV1ToV2(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		db := b.db(t, nil)
		s := v1Table(t, db)
		clock := idemtest.NewClock()
		g, err := idemkit.New(s, &idemkit.Options{Now: clock.Now, Lease: 10 * time.Second, TTL: time.Hour})
		must(t, err)
		m := &migrationFixture{s: s, db: db, clock: clock, g: g}
		v1, err := s.isV1(ctxb)
		if err != nil || !v1 {
			t.Fatalf("isV1 on the v1 table = %v, %v", v1, err)
		}

		longKey := strings.Repeat("k", 200) // stored as its hash
		now := clock.Now()
		base := func(key string, st idemkit.Status) *idemkit.Record {
			return &idemkit.Record{Scope: migrationScope, Key: key, Status: st, Fence: 3, Owner: "owner-" + key,
				Fingerprint: "fp-" + key, Response: []byte("resp-" + key), LeaseUntil: now.Add(-time.Minute),
				ExpiresAt: now.Add(30 * time.Minute), CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour)}
		}
		cases := []migrationCase{
			{key: "succeeded", rec: func(time.Time) *idemkit.Record { return base("succeeded", idemkit.StatusSucceeded) },
				check: func(t *testing.T, m *migrationFixture, key string) {
					res, err := m.g.Do(ctxb, m.call(key), mustNotRun)
					if err != nil || !res.Replayed || string(res.Value) != "resp-"+key || res.Fence != 3 {
						t.Fatalf("%s: %+v, %v; want the stored result", key, res, err)
					}
					c := m.call(key)
					c.Fingerprint = "other"
					if _, err := m.g.Do(ctxb, c, mustNotRun); !errors.Is(err, idemkit.ErrPayloadMismatch) {
						t.Fatalf("%s with another payload: %v", key, err)
					}
				}},
			{key: "rejected", rec: func(time.Time) *idemkit.Record {
				r := base("rejected", idemkit.StatusRejected)
				r.Error = "card declined"
				return r
			}, check: func(t *testing.T, m *migrationFixture, key string) {
				_, err := m.g.Do(ctxb, m.call(key), mustNotRun)
				var rej *idemkit.RejectedError
				if !errors.As(err, &rej) || rej.Message != "card declined" {
					t.Fatalf("%s: %v; want the stored rejection", key, err)
				}
			}},
			{key: "failed", rec: func(time.Time) *idemkit.Record { return base("failed", idemkit.StatusFailed) },
				check: func(t *testing.T, m *migrationFixture, key string) {
					res, err := m.g.Do(ctxb, m.call(key), func(ctx context.Context) ([]byte, error) { return []byte("again"), nil })
					if err != nil || res.Replayed || res.Fence != 4 {
						t.Fatalf("%s: %+v, %v; want a takeover at fence 4", key, res, err)
					}
				}},
			{key: "live", rec: func(now time.Time) *idemkit.Record {
				r := base("live", idemkit.StatusProcessing)
				r.LeaseUntil = now.Add(time.Hour) // still leased after the clock moves
				return r
			}, check: func(t *testing.T, m *migrationFixture, key string) {
				if _, err := m.g.Do(ctxb, m.call(key), mustNotRun); !errors.Is(err, idemkit.ErrInFlight) {
					t.Fatalf("%s: %v; want ErrInFlight", key, err)
				}
				_, err := m.s.Tx(ctxb, m.g, m.call(key), func(context.Context, *gorm.DB) ([]byte, error) { return nil, errors.New("ran") })
				if !errors.Is(err, idemkit.ErrInFlight) {
					t.Fatalf("%s through Tx: %v; want ErrInFlight", key, err)
				}
			}},
			{key: "lapsed", rec: func(time.Time) *idemkit.Record { return base("lapsed", idemkit.StatusProcessing) },
				check: func(t *testing.T, m *migrationFixture, key string) {
					var fence int64
					res, err := m.g.Do(ctxb, m.call(key), func(ctx context.Context) ([]byte, error) {
						fence, _ = idemkit.FenceFromContext(ctx)
						return []byte("taken"), nil
					})
					if err != nil || res.Fence != 4 || fence != 4 {
						t.Fatalf("%s: %+v (fence in context %d), %v; want a takeover at fence 4", key, res, fence, err)
					}
					rec, err := m.g.Get(ctxb, migrationScope, key)
					if err != nil || rec.Fingerprint != "fp-"+key {
						t.Fatalf("%s: the takeover lost the fingerprint: %+v, %v", key, rec, err)
					}
				}},
			{key: "stale", swept: true, rec: func(time.Time) *idemkit.Record { return base("stale", idemkit.StatusProcessing) },
				check: func(t *testing.T, m *migrationFixture, key string) {
					rec, err := m.g.Get(ctxb, migrationScope, key)
					if err != nil || rec.Status != idemkit.StatusFailed || rec.Fence != 4 || rec.Error != RecoveredError {
						t.Fatalf("%s after RecoverStale: %+v, %v; want FAILED at fence 4", key, rec, err)
					}
				}},
			{key: "pending-gid", rec: func(now time.Time) *idemkit.Record {
				r := base("pending-gid", idemkit.StatusProcessing)
				r.GID, r.BranchID, r.ExpiresAt = "gid-7", "01", now.Add(-time.Minute) // expired: an unsettled gid never expires
				return r
			}, check: func(t *testing.T, m *migrationFixture, key string) {
				if _, err := m.g.Do(ctxb, m.call(key), mustNotRun); !errors.Is(err, idemkit.ErrInFlight) {
					t.Fatalf("%s: %v; want ErrInFlight", key, err)
				}
				pend, err := m.g.Pending(ctxb, m.clock.Now(), 10, migrationScope)
				if err != nil || len(pend) != 1 || pend[0].Key != key || pend[0].GID != "gid-7" {
					t.Fatalf("Pending = %+v, %v; want %s", pend, err, key)
				}
				must(t, m.g.Settle(ctxb, pend[0], []byte("settled"), nil))
				rec, err := m.g.Get(ctxb, migrationScope, key)
				if err != nil || rec.Status != idemkit.StatusSucceeded || string(rec.Response) != "settled" || rec.Fence != 3 {
					t.Fatalf("%s after Settle: %+v, %v", key, rec, err)
				}
			}},
			{key: "expired", swept: true, rec: func(now time.Time) *idemkit.Record {
				r := base("expired", idemkit.StatusSucceeded)
				r.ExpiresAt = now.Add(-time.Minute)
				return r
			}, check: func(t *testing.T, m *migrationFixture, key string) {
				if _, err := m.g.Get(ctxb, migrationScope, key); !errors.Is(err, idemkit.ErrNotFound) {
					t.Fatalf("%s: %v; want it swept", key, err)
				}
			}},
			{key: longKey, check: func(t *testing.T, m *migrationFixture, key string) {
				res, err := m.g.Do(ctxb, m.call(key), mustNotRun)
				if err != nil || !res.Replayed || string(res.Value) != "long" {
					t.Fatalf("long key: %+v, %v; want the stored result", res, err)
				}
			}},
			{key: "tx-mode", check: func(t *testing.T, m *migrationFixture, key string) {
				res, err := m.s.Tx(ctxb, m.g, m.call(key), func(context.Context, *gorm.DB) ([]byte, error) { return nil, errors.New("ran") })
				if err != nil || !res.Replayed || string(res.Value) != "tx" {
					t.Fatalf("%s: %+v, %v; want the stored result", key, res, err)
				}
			}},
		}
		// Before the migration, this version writes to the v1 table: records, Execute and Tx mode.
		for _, c := range cases {
			if c.rec != nil {
				must(t, s.Insert(ctxb, c.rec(now)))
			}
		}
		_, err = g.Do(ctxb, m.call(longKey), func(context.Context) ([]byte, error) { return []byte("long"), nil })
		must(t, err)
		_, err = s.Tx(ctxb, g, m.call("tx-mode"), func(context.Context, *gorm.DB) ([]byte, error) { return []byte("tx"), nil })
		must(t, err)
		stored, err := s.Get(ctxb, migrationScope, idemkit.StoredForm(longKey))
		must(t, err)
		if !strings.HasPrefix(stored.Key, "sha256:") {
			t.Fatalf("long key stored as %q", stored.Key)
		}
		// Bulk: many records, so the rebuild takes a while with writers going.
		for i := range 300 {
			r := base(fmt.Sprintf("bulk-%03d", i), idemkit.StatusSucceeded)
			must(t, s.Insert(ctxb, r))
		}
		before := snapshot(t, s)

		// The migration, with writers going on (except SQLite, whose copy holds the write lock).
		var (
			wg      sync.WaitGroup
			stop    atomic.Bool
			written atomic.Int32
			failed  atomic.Value
		)
		if b.name != "SQLite" {
			wg.Go(func() {
				for i := 0; !stop.Load(); i++ {
					key := fmt.Sprintf("during-%d", i)
					if _, err := g.Do(ctxb, m.call(key), func(context.Context) ([]byte, error) { return []byte(key), nil }); err != nil {
						failed.Store(fmt.Errorf("%s: %w", key, err))
						return
					}
					written.Add(1)
				}
			})
		}
		time.Sleep(20 * time.Millisecond)
		err = s.Migrate(ctxb)
		stop.Store(true)
		wg.Wait()
		must(t, err)
		if f := failed.Load(); f != nil {
			t.Fatalf("a write during the migration failed: %v", f)
		}
		t.Logf("%s: %d guarded calls during the migration", b.name, written.Load())
		for i := range int(written.Load()) {
			key := fmt.Sprintf("during-%d", i)
			res, err := g.Do(ctxb, m.call(key), mustNotRun)
			if err != nil || string(res.Value) != key {
				t.Fatalf("%s written during the migration: %+v, %v", key, res, err)
			}
		}

		// The layout is v2, every record kept every value, and Migrate is now a no-op.
		if v1, err := s.isV1(ctxb); err != nil || v1 {
			t.Fatalf("isV1 after Migrate = %v, %v", v1, err)
		}
		after := snapshot(t, s)
		for k, want := range before {
			if got, ok := after[k]; !ok {
				t.Fatalf("record %s lost", k)
			} else {
				idemtest.RequireSameRecord(t, want, got)
			}
		}
		must(t, s.Migrate(ctxb))
		checkV2Layout(t, s, db)

		// Behaviour after the migration: the Guard, then the sweeper.
		clock.Advance(time.Minute)
		for _, c := range cases {
			if !c.swept {
				t.Run(c.key[:min(len(c.key), 12)], func(t *testing.T) { c.check(t, m, c.key) })
			}
		}
		n, err := s.RecoverStale(ctxb, clock.Now(), 100)
		must(t, err)
		if n != 1 {
			t.Fatalf("RecoverStale recovered %d, want 1 (stale)", n)
		}
		n, err = s.DeleteExpired(ctxb, clock.Now(), 100)
		must(t, err)
		if n != 1 {
			// pending-gid, settled long after its claim, counts TTL from its settlement.
			t.Fatalf("DeleteExpired deleted %d, want 1 (expired; pending-gid, settled now, counts from then)", n)
		}
		for _, c := range cases {
			if c.swept {
				t.Run(c.key, func(t *testing.T) { c.check(t, m, c.key) })
			}
		}
		// The new table's conformance: fresh keys run once and replay.
		res, err := s.Tx(ctxb, g, m.call("after"), func(context.Context, *gorm.DB) ([]byte, error) { return []byte("after"), nil })
		if err != nil || res.Replayed {
			t.Fatalf("a new key after the migration: %+v, %v", res, err)
		}
	})
}

// snapshot reads every record of the Store's table by its stored key.
func snapshot(t *testing.T, s *Store) map[string]*idemkit.Record {
	t.Helper()
	rows, err := s.c.query(ctxb, "SELECT scope, idem_key FROM "+s.q.quoted)
	must(t, err)
	var keys [][2]string
	for rows.Next() {
		var k [2]string
		must(t, rows.Scan(&k[0], &k[1]))
		keys = append(keys, k)
	}
	must(t, rows.Err())
	rows.Close()
	out := make(map[string]*idemkit.Record, len(keys))
	for _, k := range keys {
		rec, err := s.Get(ctxb, k[0], k[1])
		must(t, err)
		out[k[0]+"\x00"+k[1]] = rec
	}
	return out
}

// checkV2Layout fails t unless the table has the v2 primary key and exactly one secondary index.
func checkV2Layout(t *testing.T, s *Store, db *gorm.DB) {
	t.Helper()
	var pk string
	var secondary int
	switch s.Dialect() {
	case dialectMySQL:
		must(t, db.Raw("SELECT GROUP_CONCAT(column_name ORDER BY seq_in_index) FROM information_schema.statistics "+
			"WHERE table_schema = DATABASE() AND table_name = ? AND index_name = 'PRIMARY'", s.q.table).Row().Scan(&pk))
		must(t, db.Raw("SELECT count(DISTINCT index_name) FROM information_schema.statistics "+
			"WHERE table_schema = DATABASE() AND table_name = ? AND index_name <> 'PRIMARY'", s.q.table).Row().Scan(&secondary))
	case dialectPostgres:
		must(t, db.Raw("SELECT string_agg(a.attname, ',' ORDER BY array_position(i.indkey, a.attnum)) FROM pg_index i "+
			"JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = ?::regclass AND i.indisprimary",
			s.q.quoted).Row().Scan(&pk))
		must(t, db.Raw("SELECT count(*) FROM pg_index WHERE indrelid = ?::regclass AND NOT indisprimary AND indisvalid", s.q.quoted).Row().Scan(&secondary))
	default:
		must(t, db.Raw("SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk)", s.q.table).Row().Scan(&pk))
		must(t, db.Raw("SELECT count(*) FROM pragma_index_list(?) WHERE origin = 'c'", s.q.table).Row().Scan(&secondary))
	}
	if pk != "scope,idem_key" || secondary != 1 {
		t.Fatalf("after the migration: primary key %q, %d secondary indexes; want scope,idem_key and 1", pk, secondary)
	}
}

// TestMigrateV1ToV2InSchema: on PostgreSQL, a v1 table outside search_path loses its old indexes in
// the migration, and a v1 table of the same name on search_path (another application's, say) keeps
// its own: DROP INDEX names the migrated table's schema.
func TestMigrateV1ToV2InSchema(t *testing.T) {
	db := backends[1].db(t, nil)
	schema, name := testsvc.Name("s_"), testsvc.Name("t_v1_")
	must(t, db.Exec("CREATE SCHEMA "+schema).Error)
	t.Cleanup(func() { db.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE") })
	var stores []*Store
	for _, table := range []string{schema + "." + name, name} {
		s, err := New(db, &Options{Table: table})
		must(t, err)
		testsvc.DropTable(t, db, table)
		for _, stmt := range idemsql.Statements(s.q.renderDDL(v1Postgres)) {
			must(t, db.Exec(stmt).Error)
		}
		stores = append(stores, s)
	}
	indexes := func(s *Store) (n int) {
		must(t, db.Raw("SELECT count(*) FROM pg_index WHERE indrelid = ?::regclass", s.q.quoted).Row().Scan(&n))
		return n
	}
	decoy := indexes(stores[1])
	must(t, stores[0].Migrate(ctxb))
	checkV2Layout(t, stores[0], db)
	if n := indexes(stores[1]); n != decoy {
		t.Fatalf("the v1 table on search_path has %d indexes after another schema's migration, had %d", n, decoy)
	}
}

// TestCreateTableLeavesV1Table: CreateTable on a v1 table (step 1 of the README's upgrade, a v2 process
// starting on it) leaves it a v1 table, which Migrate then migrates.
func TestCreateTableLeavesV1Table(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		db := b.db(t, nil)
		s := v1Table(t, db)
		cols, id, err := s.tableColumns(ctxb)
		must(t, err)
		must(t, s.CreateTable(ctxb))
		cols2, id2, err := s.tableColumns(ctxb)
		must(t, err)
		if cols2 != cols || id2 != id || id == 0 {
			t.Fatalf("CreateTable changed the v1 table: %d columns (id %d) -> %d (id %d)", cols, id, cols2, id2)
		}
		must(t, s.Migrate(ctxb))
		checkV2Layout(t, s, db)
	})
}
