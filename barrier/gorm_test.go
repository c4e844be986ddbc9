package barrier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	idemsql "github.com/idemkit/idemkit/sql"

	"github.com/idemkit/idemkit/internal/testsvc"
)

type dialectCase struct {
	name string
	open func(testing.TB, *gorm.Config) *gorm.DB
}

var dialects = []dialectCase{{"mysql", testsvc.MySQL}, {"postgres", testsvc.Postgres}, {"sqlite", testsvc.SQLite}}

func eachDialect(t *testing.T, f func(t *testing.T, db *gorm.DB)) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) { f(t, d.open(t, nil)) })
	}
}

func TestGormNeedsTransaction(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		g := newGormTable(t, db)
		b, _ := NewBranch(TransSaga, testsvc.Name("gid-"), "01", OpAction)
		ran := false
		fn := func(*gorm.DB) error { ran = true; return nil }
		if err := g.Call(ctx, db, b, fn); !errors.Is(err, ErrNoTransaction) {
			t.Fatalf("Call on the database handle: %v, want ErrNoTransaction", err)
		}
		if err := g.Call(ctx, nil, b, fn); !errors.Is(err, ErrNoTransaction) {
			t.Fatalf("Call on nil: %v, want ErrNoTransaction", err)
		}
		if err := g.Call(ctx, db.Begin(), &Branch{Gid: "g"}, fn); !errors.Is(err, ErrInvalidBranch) {
			t.Fatalf("Call with an invalid branch: %v, want ErrInvalidBranch", err)
		}
		if ran {
			t.Fatal("business ran")
		}
		tx := db.Begin()
		defer tx.Rollback()
		if _, err := NewGorm(tx, nil); err == nil {
			t.Fatal("NewGorm accepted a transaction")
		}
		if _, err := NewGorm(db, &GormOptions{Table: "barrier; DROP TABLE x"}); err == nil {
			t.Fatal("NewGorm accepted an injected table name")
		}
	})
}

// TestGormManualTransaction: the barrier inside a transaction from db.Begin, committed and rolled back
// by the caller.
func TestGormManualTransaction(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		k := &gormBank{db: db, g: newGormTable(t, db), accts: newAccounts(t, db)}
		gid := testsvc.Name("gid-")
		b, _ := NewBranch(TransSaga, gid, "01", OpAction)
		tx := db.Begin()
		if err := k.g.Call(ctx, tx, b, k.business(transOut, adjustBalance, -amount, false)); err != nil {
			t.Fatal(err)
		}
		tx.Rollback() // the caller changes its mind: the barrier row goes too
		if n := k.barrierRows(t, gid); n != 0 {
			t.Fatalf("%d rows after rollback", n)
		}
		b, _ = NewBranch(TransSaga, gid, "01", OpAction)
		tx = db.Begin()
		if err := k.g.Call(ctx, tx, b, k.business(transOut, adjustBalance, -amount, false)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit().Error; err != nil {
			t.Fatal(err)
		}
		checkAccounts(t, k, map[int]account{transOut: {initBalance - amount, 0}, transIn: {initBalance, 0}})
	})
}

// TestGormPrepareStmt: with PrepareStmt the transaction's connection is gorm's prepared-statement
// wrapper (not *sql.Tx, which dtmcli needs); the barrier runs on it and its statements are cached.
func TestGormPrepareStmt(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			db := d.open(t, &gorm.Config{Logger: logger.Discard, PrepareStmt: true})
			k := &gormBank{db: db, g: newGormTable(t, db), accts: newAccounts(t, db), mode: gormTx}
			err := db.Transaction(func(tx *gorm.DB) error {
				if _, ok := tx.Statement.ConnPool.(*gorm.PreparedStmtTX); !ok {
					t.Errorf("ConnPool is %T, want *gorm.PreparedStmtTX", tx.Statement.ConnPool)
				}
				b, _ := NewBranch(TransTCC, testsvc.Name("gid-"), "01", OpCancel)
				out, err := k.g.CallOutcome(ctx, tx, b, k.business(transOut, adjustTrading, amount, false))
				if out != NullCompensation {
					t.Errorf("outcome %s", out)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			pdb, ok := db.Statement.ConnPool.(*gorm.PreparedStmtDB)
			if !ok {
				t.Fatalf("ConnPool is %T", db.Statement.ConnPool)
			}
			if _, ok := pdb.Stmts.Get(k.g.d.insert); !ok {
				t.Fatalf("barrier insert not in the prepared statement cache")
			}
		})
	}
}

// TestGormPostgresTransactionSurvivesConflict: a repeated delivery inside a PostgreSQL transaction does
// not abort it (an INSERT that violated the unique constraint would): the caller can go on.
func TestGormPostgresTransactionSurvivesConflict(t *testing.T) {
	db := testsvc.Postgres(t, nil)
	ctx := context.Background()
	g := newGormTable(t, db)
	gid := testsvc.Name("gid-")
	for i, want := range []Outcome{Proceed, Duplicate} {
		err := db.Transaction(func(tx *gorm.DB) error {
			b, _ := NewBranch(TransSaga, gid, "01", OpAction)
			out, err := g.Enter(ctx, tx, b)
			if err != nil || out != want {
				return fmt.Errorf("delivery %d: %s, %v; want %s", i, out, err, want)
			}
			var one int
			return tx.Raw("SELECT 1").Scan(&one).Error // fails with 25P02 in an aborted transaction
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestGormConcurrentDelivery: the same action delivered by several goroutines at once runs once; the
// unique index makes the later inserts wait for the first transaction and then do nothing.
func TestGormConcurrentDelivery(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		k := &gormBank{db: db, g: newGormTable(t, db), accts: newAccounts(t, db)}
		gid := testsvc.Name("gid-")
		const n = 6
		outs := make([]Outcome, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				b, _ := NewBranch(TransSaga, gid, "01", OpAction)
				outs[i], errs[i] = k.run(context.Background(), b, transOut, adjustBalance, -amount, false)
			})
		}
		wg.Wait()
		proceeded := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("delivery %d: %v", i, errs[i])
			}
			if outs[i] == Proceed {
				proceeded++
			} else if outs[i] != Duplicate {
				t.Fatalf("delivery %d: %s", i, outs[i])
			}
		}
		if proceeded != 1 {
			t.Fatalf("%d deliveries proceeded, want 1 (%v)", proceeded, outs)
		}
		checkAccounts(t, k, map[int]account{transOut: {initBalance - amount, 0}, transIn: {initBalance, 0}})
	})
}

// TestGormConcurrentCompensation: the same compensation (a saga's compensate, a TCC's cancel) delivered by
// several goroutines at once — after its action or try, or as a null compensation — runs (or is skipped)
// once, and every other delivery waits and sees a duplicate. Inserting the origin row first, as DTM does,
// deadlocked concurrent cancels on MySQL/MariaDB (the losers failed): each took a shared next-key lock on
// the try row, and "cancel" sorts before "try" in the unique key, so each then inserted its row into the
// gap the other held.
func TestGormConcurrentCompensation(t *testing.T) {
	for _, tt := range []struct{ trans, op, comp string }{{TransSaga, OpAction, OpCompensate}, {TransTCC, OpTry, OpCancel}} {
		t.Run(tt.comp, func(t *testing.T) { testConcurrentCompensation(t, tt.trans, tt.op, tt.comp) })
	}
}

func testConcurrentCompensation(t *testing.T, trans, op, comp string) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		k := &gormBank{db: db, g: newGormTable(t, db), accts: newAccounts(t, db)}
		const rounds, n = 20, 4
		for r := range rounds {
			gid := testsvc.Name("gid-")
			acted := r%2 == 0
			if acted {
				b, _ := NewBranch(trans, gid, "01", op)
				if out, err := k.run(context.Background(), b, transOut, adjustBalance, -amount, false); err != nil || out != Proceed {
					t.Fatalf("round %d: action: %s, %v", r, out, err)
				}
			}
			outs := make([]Outcome, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					b, _ := NewBranch(trans, gid, "01", comp)
					outs[i], errs[i] = k.run(context.Background(), b, transOut, adjustBalance, amount, false)
				})
			}
			wg.Wait()
			want := NullCompensation
			if acted {
				want = Proceed
			}
			first := 0
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("round %d: delivery %d: %v", r, i, errs[i])
				}
				if outs[i] == want {
					first++
				} else if outs[i] != Duplicate {
					t.Fatalf("round %d: delivery %d: %s", r, i, outs[i])
				}
			}
			if first != 1 {
				t.Fatalf("round %d: %d deliveries were %s, want 1 (%v)", r, first, want, outs)
			}
		}
		checkAccounts(t, k, map[int]account{transOut: {initBalance, 0}, transIn: {initBalance, 0}})
	})
}

// TestGormTryRacingCancel: a try delivered while its cancel runs (DTM cancels a try that timed out while the
// try is still on its way) either runs and is cancelled, or is hanging after an empty cancel; neither
// delivery fails. With the origin row inserted first, the cancel's insert of its row deadlocked on
// MySQL/MariaDB with the try that waited on the try row the cancel had inserted.
func TestGormTryRacingCancel(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		k := &gormBank{db: db, g: newGormTable(t, db), accts: newAccounts(t, db)}
		const rounds = 20
		for r := range rounds {
			gid := testsvc.Name("gid-")
			var try, cancel Outcome
			var tryErr, cancelErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				b, _ := NewBranch(TransTCC, gid, "01", OpTry)
				try, tryErr = k.run(context.Background(), b, transOut, adjustTrading, -amount, false)
			})
			wg.Go(func() {
				b, _ := NewBranch(TransTCC, gid, "01", OpCancel)
				cancel, cancelErr = k.run(context.Background(), b, transOut, adjustTrading, amount, false)
			})
			wg.Wait()
			if tryErr != nil || cancelErr != nil {
				t.Fatalf("round %d: try %v, cancel %v", r, tryErr, cancelErr)
			}
			if !(try == Proceed && cancel == Proceed || try == Hanging && cancel == NullCompensation) {
				t.Fatalf("round %d: try %s, cancel %s", r, try, cancel)
			}
		}
		checkAccounts(t, k, map[int]account{transOut: {initBalance, 0}, transIn: {initBalance, 0}})
	})
}

// TestGormMsgDuplicate: a repeated msg op is rejected with ErrDuplicate, as dtmcli rejects it with
// ErrDuplicated.
func TestGormMsgDuplicate(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		g := newGormTable(t, db)
		gid := testsvc.Name("gid-")
		for i, want := range []error{nil, ErrDuplicate} {
			b, _ := NewBranch(TransMsg, gid, "00", OpMsg)
			if err := g.Transaction(context.Background(), b, func(*gorm.DB) error { return nil }); !errors.Is(err, want) {
				t.Fatalf("delivery %d: %v, want %v", i, err, want)
			}
		}
	})
}

// TestGormDeleteOlder: rows created before the cutoff go, oldest first, at most limit per call.
func TestGormDeleteOlder(t *testing.T) {
	mysqlTZ := dialectCase{"mysql/time_zone-08:00", func(t testing.TB, cfg *gorm.Config) *gorm.DB {
		testsvc.MySQL(t, nil) // creates the database or skips
		db, err := gorm.Open(mysql.Open(testsvc.MySQLDSN()+testsvc.Database+"?time_zone=%27-08%3A00%27"), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		sqlDB, _ := db.DB()
		t.Cleanup(func() { _ = sqlDB.Close() })
		return db
	}}
	for _, d := range append(dialects, mysqlTZ) {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			db := d.open(t, nil)
			k := &gormBank{db: db, g: newGormTable(t, db), accts: newAccounts(t, db)}
			gid := testsvc.Name("gid-")
			for i := range 5 {
				b, _ := NewBranch(TransSaga, gid, fmt.Sprintf("%02d", i+1), OpAction)
				if _, err := k.run(ctx, b, transOut, adjustBalance, -1, false); err != nil {
					t.Fatal(err)
				}
			}
			// Age branches 01..03 by two days, in the database's own notion of time.
			age := map[string]string{
				"mysql":    "create_time = create_time - INTERVAL 2 DAY",
				"postgres": "create_time = create_time - INTERVAL '2 days'",
				"sqlite":   "create_time = datetime(create_time, '-2 days')",
			}[db.Dialector.Name()]
			if err := db.Exec("UPDATE "+k.g.Table()+" SET "+age+" WHERE gid = ? AND branch_id IN ('01', '02', '03')", gid).Error; err != nil {
				t.Fatal(err)
			}
			before := time.Now().Add(-time.Hour) // within the -08:00 offset: catches a zone mix-up
			var got []int
			for {
				n, err := k.g.DeleteOlder(ctx, before, 2)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, n)
				if n < 2 {
					break
				}
			}
			if fmt.Sprint(got) != "[2 1]" {
				t.Fatalf("batches deleted %v, want [2 1]", got)
			}
			if n := k.barrierRows(t, gid); n != 2 {
				t.Fatalf("%d rows left, want the 2 recent ones", n)
			}
			// A cutoff in the future takes the rest.
			if n, err := k.g.DeleteOlder(ctx, time.Now().Add(time.Hour), 0); err != nil || n != 2 {
				t.Fatalf("DeleteOlder(now+1h) = %d, %v; want 2", n, err)
			}
		})
	}
}

// TestGormDTMPostgresTable: on a table made with DTM's own PostgreSQL DDL (create_time has no default),
// the barrier sets create_time so DeleteOlder sees its rows.
func TestGormDTMPostgresTable(t *testing.T) {
	db := testsvc.Postgres(t, nil)
	ctx := context.Background()
	schema := testsvc.Name("bar_")
	t.Cleanup(func() { db.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE") })
	for _, stmt := range []string{
		"CREATE SCHEMA " + schema,
		"CREATE SEQUENCE " + schema + ".barrier_seq",
		`CREATE TABLE ` + schema + `.barrier(
  id bigint NOT NULL DEFAULT NEXTVAL ('` + schema + `.barrier_seq'),
  trans_type varchar(45) default '', gid varchar(128) default '', branch_id varchar(128) default '',
  op varchar(45) default '', barrier_id varchar(45) default '', reason varchar(45) default '',
  create_time timestamp(0) with time zone DEFAULT NULL, update_time timestamp(0) with time zone DEFAULT NULL,
  PRIMARY KEY(id), CONSTRAINT uniq_barrier unique(gid, branch_id, op, barrier_id))`,
	} {
		if err := db.Exec(stmt).Error; err != nil {
			t.Fatal(err)
		}
	}
	g, err := NewGorm(db, &GormOptions{Table: schema + ".barrier"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewBranch(TransTCC, testsvc.Name("gid-"), "01", OpCancel)
	if out, err := g.TransactionOutcome(ctx, b, func(*gorm.DB) error { return nil }); err != nil || out != NullCompensation {
		t.Fatalf("%s, %v", out, err)
	}
	if n, err := g.DeleteOlder(ctx, time.Now().Add(time.Hour), 10); err != nil || n != 2 {
		t.Fatalf("DeleteOlder = %d, %v; want 2", n, err)
	}
}

// TestDDLFiles: the sql/barrier_*.sql files create a table the barrier works on, with the same shape as
// CreateTable's.
func TestDDLFiles(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		ddl, err := idemsql.File("barrier", db.Dialector.Name())
		if err != nil {
			t.Fatal(err)
		}
		table := DefaultSQLiteTable // a fresh database file
		switch db.Dialector.Name() {
		case "mysql":
			name := testsvc.Name("dtm_barrier_")
			ddl = strings.ReplaceAll(ddl, "dtm_barrier", name)
			table = name + ".barrier"
			t.Cleanup(func() { db.Exec("DROP DATABASE IF EXISTS " + name) })
		case "postgres":
			name := testsvc.Name("dtm_barrier_")
			ddl = strings.ReplaceAll(ddl, "dtm_barrier", name)
			table = name + ".barrier"
			t.Cleanup(func() { db.Exec("DROP SCHEMA IF EXISTS " + name + " CASCADE") })
		}
		stmts := idemsql.Statements(ddl)
		if len(stmts) < 2 {
			t.Fatalf("DDL has %d statements", len(stmts))
		}
		for _, s := range stmts {
			if err := db.Exec(s).Error; err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		g, err := NewGorm(db, &GormOptions{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if err := g.CreateTable(ctx); err != nil { // IF NOT EXISTS: a no-op on the file's table
			t.Fatal(err)
		}
		gid := testsvc.Name("gid-")
		for _, want := range []Outcome{NullCompensation, Duplicate} {
			b, _ := NewBranch(TransTCC, gid, "01", OpCancel)
			if out, err := g.TransactionOutcome(ctx, b, func(*gorm.DB) error { return nil }); err != nil || out != want {
				t.Fatalf("%s, %v; want %s", out, err, want)
			}
		}
		b, _ := NewBranch(TransTCC, gid, "01", OpTry)
		if out, err := g.TransactionOutcome(ctx, b, func(*gorm.DB) error { return nil }); err != nil || out != Hanging {
			t.Fatalf("%s, %v; want hanging", out, err)
		}
	})
}

// TestGormPostgresSequenceBehind: with the table's id sequence behind its rows (a data-only copy, a
// logical-replication failover), a new branch's insert conflicts on the primary key. That is an
// error (DTM retries; every failed insert moves the sequence on), never a repeated delivery: before,
// ON CONFLICT DO NOTHING without a target took it for one, and the business was skipped and answered
// success.
func TestGormPostgresSequenceBehind(t *testing.T) {
	db := testsvc.Postgres(t, nil)
	ctx := context.Background()
	g := newGormTable(t, db)
	for range 3 {
		b, _ := NewBranch(TransSaga, testsvc.Name("old-"), "01", OpAction)
		if err := g.Transaction(ctx, b, func(*gorm.DB) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Exec("SELECT setval(pg_get_serial_sequence(?, 'id'), 1, false)", g.Table()).Error; err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{OpAction, OpCompensate} {
		b, _ := NewBranch(TransSaga, testsvc.Name("new-"), "01", op)
		ran := false
		out, err := g.TransactionOutcome(ctx, b, func(*gorm.DB) error { ran = true; return nil })
		if err == nil || ran || out == Duplicate {
			t.Fatalf("%s on a sequence behind the rows: %s, %v, ran=%v; want an error, nothing run", op, out, err, ran)
		}
	}
}

// TestGormHangingSeenFromASnapshot: a try delivered after its cancel committed is Hanging even in a
// caller's transaction whose snapshot predates the cancel (MySQL REPEATABLE READ after a first read):
// the reason is read with a locking read. It was reported Duplicate (the business skipped all the same).
func TestGormHangingSeenFromASnapshot(t *testing.T) {
	db := testsvc.MySQL(t, nil)
	ctx := context.Background()
	g := newGormTable(t, db)
	gid := testsvc.Name("gid-")
	tx := db.Begin()
	defer tx.Rollback()
	var n int64
	if err := tx.Raw("SELECT COUNT(*) FROM " + g.Table()).Scan(&n).Error; err != nil { // the snapshot
		t.Fatal(err)
	}
	cancel, _ := NewBranch(TransTCC, gid, "01", OpCancel)
	if out, err := g.TransactionOutcome(ctx, cancel, func(*gorm.DB) error { return nil }); err != nil || out != NullCompensation {
		t.Fatalf("cancel first: %s, %v", out, err)
	}
	try, _ := NewBranch(TransTCC, gid, "01", OpTry)
	if out, err := g.Enter(ctx, tx, try); err != nil || out != Hanging {
		t.Fatalf("the late try in an older snapshot: %s, %v; want Hanging", out, err)
	}
}

// TestGormRetryWithTheSameBranch: a transaction retried with the same Branch after a transient error
// (rolled back) uses the same barrier id, so a later redelivery — a new Branch — finds its rows and
// does not run the business again. The retry committed under the next id, and the business ran twice.
func TestGormRetryWithTheSameBranch(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		ctx := context.Background()
		g := newGormTable(t, db)
		gid := testsvc.Name("gid-")
		runs := 0
		b, _ := NewBranch(TransSaga, gid, "01", OpAction)
		transient := errors.New("deadlock, try again")
		if err := g.Transaction(ctx, b, func(*gorm.DB) error { return transient }); !errors.Is(err, transient) {
			t.Fatal(err)
		}
		if err := g.Transaction(ctx, b, func(*gorm.DB) error { runs++; return nil }); err != nil {
			t.Fatal(err)
		}
		redelivery, _ := NewBranch(TransSaga, gid, "01", OpAction)
		out, err := g.TransactionOutcome(ctx, redelivery, func(*gorm.DB) error { runs++; return nil })
		if err != nil || out != Duplicate || runs != 1 {
			t.Fatalf("redelivery after a retried call: %s, %v, business ran %d times; want Duplicate, once", out, err, runs)
		}
	})
}

// TestGormPostgresRefusesNUL: PostgreSQL text refuses NUL in every insert, so a branch holding one is
// ErrInvalidBranch at once (an answer DTM does not retry as a 500), not a database error each time.
// MySQL stores it (TestDifferentialDTMCli's "tab and nul").
func TestGormPostgresRefusesNUL(t *testing.T) {
	db := testsvc.Postgres(t, nil)
	g := newGormTable(t, db)
	b, err := NewBranch(TransSaga, "a\x00b", "01", OpAction)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.TransactionOutcome(context.Background(), b, func(*gorm.DB) error { return nil }); !errors.Is(err, ErrInvalidBranch) {
		t.Fatalf("a gid with NUL on PostgreSQL: %v, want ErrInvalidBranch", err)
	}
}

// TestGormPostgresLeastPrivilege: on PostgreSQL the barrier needs no privilege on its table beyond the
// SELECT and INSERT that dtmcli's barrier needs. The read that tells a repeated delivery from a hanging
// one locked the row (SELECT ... FOR SHARE), which PostgreSQL allows only with UPDATE: with dtmcli's
// grants the first delivery ran, and every later one — DTM's retry after a lost answer, a late try, a
// second back-check — failed with "permission denied" (a 500), so DTM retried the branch for ever.
func TestGormPostgresLeastPrivilege(t *testing.T) {
	ctx := context.Background()
	admin := testsvc.Postgres(t, nil)
	owner := newGormTable(t, admin)
	schema := strings.Split(owner.Table(), ".")[0]
	role := testsvc.Name("barrier_user_")
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT, INSERT ON " + owner.Table() + " TO " + role,
		"GRANT USAGE ON ALL SEQUENCES IN SCHEMA " + schema + " TO " + role,
	} {
		if err := admin.Exec(stmt).Error; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { // after the role's connections are closed
		for _, stmt := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if err := admin.Exec(stmt).Error; err != nil {
				t.Logf("%s: %v", stmt, err)
			}
		}
	})
	g, err := NewGorm(testsvc.PostgresWith(t, nil, " user="+role), &GormOptions{Table: owner.Table()})
	if err != nil {
		t.Fatal(err)
	}
	deliver := func(gid, op string) (Outcome, error) {
		trans := TransSaga
		if op == OpTry || op == OpCancel {
			trans = TransTCC
		}
		b, _ := NewBranch(trans, gid, "01", op)
		return g.TransactionOutcome(ctx, b, func(*gorm.DB) error { return nil })
	}
	saga, tcc := testsvc.Name("gid-"), testsvc.Name("gid-")
	for i, d := range []struct {
		gid, op string
		want    Outcome
	}{
		{saga, OpAction, Proceed}, {saga, OpAction, Duplicate},
		{saga, OpCompensate, Proceed}, {saga, OpCompensate, Duplicate},
		{tcc, OpCancel, NullCompensation}, {tcc, OpCancel, Duplicate}, {tcc, OpTry, Hanging},
	} {
		if out, err := deliver(d.gid, d.op); err != nil || out != d.want {
			t.Fatalf("delivery %d (%s): %s, %v; want %s", i, d.op, out, err, d.want)
		}
	}
	msg := testsvc.Name("gid-")
	for i := range 2 {
		if err := g.QueryPrepared(ctx, msg); !errors.Is(err, ErrMsgRolledBack) {
			t.Fatalf("back-check %d of a message never committed: %v, want ErrMsgRolledBack", i, err)
		}
	}
}
