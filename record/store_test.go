package record

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/testsvc"
)

var _ idemkit.Store = (*Store)(nil)

var ctxb = context.Background()

// backend is a real database the tests run on.
type backend struct {
	name string
	open func(t testing.TB, cfg *gorm.Config) *gorm.DB
}

var backends = []backend{
	{"MariaDB", testsvc.MySQL},
	{"PostgreSQL", testsvc.Postgres},
	{"SQLite", testsvc.SQLite},
}

// multiBackend is MariaDB on a DSN that allows multi-statement packets: the Store's transactions for
// Guard.Tx then run on a held connection and send the record's INSERT with the COMMIT (multi.go).
var multiBackend = backend{"MariaDB-multi", testsvc.MySQLMulti}

// eachTxBackend runs f as a subtest per backend, and on multiBackend.
func eachTxBackend(t *testing.T, f func(t *testing.T, b backend)) {
	eachBackend(t, f)
	t.Run(multiBackend.name, func(t *testing.T) { f(t, multiBackend) })
}

// eachBackend runs f as a subtest per backend.
func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// maxConns bounds each test pool: the servers are shared with other packages' tests, and the
// conformance suite's storms would otherwise open hundreds of connections.
const maxConns = 10

// db opens b with cfg (nil for the silent default) and a bounded pool.
func (b backend) db(t testing.TB, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	db := b.open(t, cfg)
	sqlDB, err := db.DB()
	must(t, err)
	sqlDB.SetMaxOpenConns(maxConns)
	return db
}

// setup opens b with the default test configuration and returns a Store over a fresh table.
func setup(t *testing.T, b backend) (*Store, *gorm.DB) {
	t.Helper()
	db := b.db(t, nil)
	return newTable(t, db), db
}

// newTable returns a Store over a fresh table created with CreateTable on db, dropped when t ends.
func newTable(t testing.TB, db *gorm.DB) *Store {
	t.Helper()
	table := testsvc.Name("t_rec_")
	s, err := New(db, &Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	testsvc.DropTable(t, db, table)
	if err := s.CreateTable(ctxb); err != nil {
		t.Fatal(err)
	}
	return s
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestConformance(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		db := b.conformanceDB(t, nil)
		idemtest.RunStore(t, func(t *testing.T) idemkit.Store { return newTable(t, db) })
	})
}

// TestConformanceMultiStatements runs the suite on MariaDB with multi-statement packets: Guard.Tx's
// transactions then begin with the read and end with the record's INSERT and the COMMIT in one packet.
func TestConformanceMultiStatements(t *testing.T) {
	db := multiBackend.db(t, nil)
	idemtest.RunStore(t, func(t *testing.T) idemkit.Store { return newTable(t, db) })
}

// TestConformancePrepareStmt runs the suite with gorm's prepared-statement mode.
func TestConformancePrepareStmt(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		db := b.conformanceDB(t, &gorm.Config{PrepareStmt: true, Logger: logger.Discard})
		idemtest.RunStore(t, func(t *testing.T) idemkit.Store { return newTable(t, db) })
	})
}

// conformanceDB opens b for the conformance suite. SQLite gets the configuration it runs best in: one
// connection (it has a single writer, and several connections only take turns through its busy
// handler's sleeps) and synchronous=NORMAL in WAL mode. The suite's storm sends 800 calls at once, and
// under -race the pure-Go driver is about ten times slower (checkptr), so on a busy 2-core machine the
// default pool made finishes exceed the Guard's 5s FinishTimeout. Concurrent SQLite connections are
// exercised by TestSQLiteConcurrentConnections and the Tx-mode tests.
func (b backend) conformanceDB(t *testing.T, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	if b.name != "SQLite" {
		return b.db(t, cfg)
	}
	if cfg == nil {
		cfg = &gorm.Config{Logger: logger.Discard}
	}
	db, err := gorm.Open(sqlite.Open(t.TempDir()+"/conformance.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"), cfg)
	must(t, err)
	sqlDB, err := db.DB()
	must(t, err)
	sqlDB.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

// TestSQLiteConcurrentConnections: racing inserts and takeovers over several SQLite connections (the
// conformance suite runs SQLite on one): exactly one of each wins, the rest see ErrExists / ErrFenced.
func TestSQLiteConcurrentConnections(t *testing.T) {
	s, _ := setup(t, backends[2])
	const n = 16
	var wg sync.WaitGroup
	var wins, exists, fenced, updated atomic.Int32
	start := make(chan struct{})
	base := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusProcessing, Fence: 1, Owner: "o"}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			rec := *base
			rec.Owner = fmt.Sprintf("o%d", i)
			switch err := s.Insert(ctxb, &rec); {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, idemkit.ErrExists):
				exists.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if wins.Load() != 1 || exists.Load() != n-1 {
		t.Fatalf("inserts: %d won, %d ErrExists", wins.Load(), exists.Load())
	}
	cur, err := s.Get(ctxb, "s", "k")
	must(t, err)
	start = make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			next := *cur
			next.Fence, next.Owner = cur.Fence+1, fmt.Sprintf("t%d", i)
			switch err := s.Update(ctxb, &next, cur.Version()); {
			case err == nil:
				updated.Add(1)
			case errors.Is(err, idemkit.ErrFenced):
				fenced.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if updated.Load() != 1 || fenced.Load() != n-1 {
		t.Fatalf("takeovers: %d won, %d ErrFenced", updated.Load(), fenced.Load())
	}
}
