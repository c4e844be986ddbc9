package record

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/sqlcount"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/memory"
)

// multiFixture is a txFixture on multiBackend, its pool bounded to conns connections.
func multiFixture(t *testing.T, conns int) *txFixture {
	t.Helper()
	f := newTxFixture(t, multiBackend, nil)
	sqlDB, err := f.db.DB()
	must(t, err)
	sqlDB.SetMaxOpenConns(conns)
	sqlDB.SetMaxIdleConns(conns)
	return f
}

// noOpenTransaction fails t when a connection of db's pool (at most conns) is inside a transaction:
// it takes them all at once and asks each.
func noOpenTransaction(t *testing.T, db *gorm.DB, conns int) {
	t.Helper()
	sqlDB, err := db.DB()
	must(t, err)
	ctx, cancel := context.WithTimeout(ctxb, 10*time.Second)
	defer cancel()
	for i := range conns {
		c, err := sqlDB.Conn(ctx)
		if err != nil {
			t.Fatalf("taking connection %d of %d: %v", i+1, conns, err)
		}
		defer c.Close()
		var in int
		must(t, c.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&in))
		if in != 0 {
			t.Fatalf("connection %d of the pool is inside a transaction", i+1)
		}
	}
}

// TestMultiStatementDetection: the Store begins multi-statement transactions exactly when the
// connection allows them and nothing turns them off — also when the first transactions of a Store on
// a pool without them begin concurrently (each waits for the answer, none takes a multi-statement
// path the server refuses).
func TestMultiStatementDetection(t *testing.T) {
	isMulti := func(t *testing.T, s *Store) bool {
		t.Helper()
		tx, err := s.BeginTx(ctxb)
		must(t, err)
		defer func() { must(t, tx.Rollback()) }()
		_, ic := tx.(idemkit.InsertCommitter)
		return ic
	}
	multiDB := multiBackend.db(t, nil)
	if s := newTable(t, multiDB); !isMulti(t, s) {
		t.Error("multiStatements=true: not a multi-statement transaction")
	}
	off, err := New(multiDB, &Options{Table: newTable(t, multiDB).Table(), NoMultiStatements: true})
	must(t, err)
	if isMulti(t, off) {
		t.Error("NoMultiStatements: a multi-statement transaction")
	}
	ps := multiBackend.db(t, &gorm.Config{PrepareStmt: true, Logger: logger.Discard})
	if s := newTable(t, ps); isMulti(t, s) {
		t.Error("PrepareStmt: a multi-statement transaction")
	}

	// A dialector on an existing connection hides the DSN: the first transactions ask the server.
	onConn := func(t *testing.T, params string) *gorm.DB {
		t.Helper()
		backends[0].db(t, nil) // creates the test database, or skips/fails without MariaDB
		sqlDB, err := sql.Open("mysql", testsvc.MySQLDSN()+testsvc.Database+"?timeout=3s"+params)
		must(t, err)
		t.Cleanup(func() { _ = sqlDB.Close() })
		db, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
		must(t, err)
		return db
	}
	if s := newTable(t, onConn(t, "&multiStatements=true")); !isMulti(t, s) {
		t.Error("existing connection with multiStatements: not a multi-statement transaction")
	}
	plain := onConn(t, "")
	s := newTable(t, plain)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			tx, err := s.BeginTx(ctxb)
			if err != nil {
				t.Error(err)
				return
			}
			if _, ic := tx.(idemkit.InsertCommitter); ic {
				t.Error("without multiStatements: a multi-statement transaction")
			}
			if err := tx.Rollback(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	g, err := idemkit.New(s, nil)
	must(t, err)
	biz := bizTable(t, plain)
	for _, key := range []string{"a", "b"} {
		if _, err := s.Tx(ctxb, g, idemkit.Call{Scope: "detect", Key: key}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
			return []byte("ok"), tx.Exec("INSERT INTO "+biz+" (k, fence) VALUES (?, 1)", key).Error
		}); err != nil {
			t.Fatalf("Tx without multiStatements: %v", err)
		}
	}
}

// TestMultiStatementLiterals: the values the packets carry as literals come back byte for byte —
// quotes, backslashes, NUL and invalid UTF-8 in the binary columns, multi-byte text in the others.
func TestMultiStatementLiterals(t *testing.T) {
	f := multiFixture(t, 4)
	rec := &idemkit.Record{
		Scope: "sc'ope\\\x00\xff", Key: "k\"ey;'); COMMIT; --\xfe\x01", Status: idemkit.StatusSucceeded, Fence: 7,
		Owner: "ow'ner", Fingerprint: "fp\\é中", GID: "gid'1", BranchID: "01\"",
		Response: []byte("r\x00\xff'\\;"), Error: "l'erreur \"é\" \\",
		LeaseUntil: time.UnixMilli(1_700_000_000_123), ExpiresAt: time.UnixMilli(1_800_000_000_456),
		CreatedAt: time.UnixMilli(1_700_000_000_000), UpdatedAt: time.UnixMilli(1_700_000_000_999),
	}
	tx, err := f.store.BeginTx(ctxb)
	must(t, err)
	must(t, tx.(idemkit.InsertCommitter).InsertCommit(ctxb, rec))
	got, err := f.store.Get(ctxb, rec.Scope, rec.Key)
	must(t, err)
	if got.Status != rec.Status || got.Fence != rec.Fence || got.Owner != rec.Owner || got.Fingerprint != rec.Fingerprint ||
		got.GID != rec.GID || got.BranchID != rec.BranchID || !bytes.Equal(got.Response, rec.Response) || got.Error != rec.Error ||
		!got.LeaseUntil.Equal(rec.LeaseUntil) || !got.ExpiresAt.Equal(rec.ExpiresAt) ||
		!got.CreatedAt.Equal(rec.CreatedAt) || !got.UpdatedAt.Equal(rec.UpdatedAt) {
		t.Fatalf("stored\n%+v\nread back\n%+v", rec, got)
	}
	// A key with a record: the probe finds it, the read and ROLLBACK leave in one packet, and no
	// transaction is left.
	btx, read, err := f.store.BeginTxGet(ctxb, rec.Scope, rec.Key)
	must(t, err)
	if btx != nil || read.Scope != rec.Scope || read.Key != rec.Key || read.Status != rec.Status || read.Fence != rec.Fence ||
		read.Owner != rec.Owner || read.Fingerprint != rec.Fingerprint || read.GID != rec.GID || read.BranchID != rec.BranchID ||
		!bytes.Equal(read.Response, rec.Response) || read.Error != rec.Error || !read.LeaseUntil.Equal(rec.LeaseUntil) ||
		!read.ExpiresAt.Equal(rec.ExpiresAt) || !read.CreatedAt.Equal(rec.CreatedAt) || !read.UpdatedAt.Equal(rec.UpdatedAt) {
		t.Fatalf("BeginTxGet: %v,\n%+v\nwant\n%+v", btx, read, rec)
	}
	noOpenTransaction(t, f.db, 4)
	btx, _, err = f.store.BeginTxGet(ctxb, rec.Scope, rec.Key+"x")
	if !errors.Is(err, idemkit.ErrNotFound) || btx == nil {
		t.Fatalf("BeginTxGet of a missing key: %v, %v; want a transaction and ErrNotFound", btx, err)
	}
	must(t, btx.Rollback())
	noOpenTransaction(t, f.db, 4)
}

// TestMultiStatementReadFails: when the read after the probe fails (here: its table is gone), the
// read's error comes back within the call and no connection is left inside the transaction. (The
// ROLLBACK leads that packet for another failure this cannot provoke: an error answering a statement
// after a result set leaves go-sql-driver v1.7 waiting, past any deadline, for results that never
// come; see readEnding.)
func TestMultiStatementReadFails(t *testing.T) {
	f := multiFixture(t, 2)
	must(t, f.store.Insert(ctxb, &idemkit.Record{Scope: "rf", Key: "k", Status: idemkit.StatusSucceeded, Fence: 1, Owner: "o"}))
	f.store.q.rollbackGetPfx = "ROLLBACK; SELECT " + columns + " FROM no_such_table_idemkit WHERE scope = "
	ctx, cancel := context.WithTimeout(ctxb, 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := f.store.BeginTxGet(ctx, "rf", "k")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "no_such_table_idemkit") {
			t.Fatalf("BeginTxGet with a failing read: %v, want the read's error", err)
		}
	case <-ctx.Done():
		t.Fatal("BeginTxGet with a failing read did not return")
	}
	noOpenTransaction(t, f.db, 2)
}

// TestMultiStatementInsertConflict: the INSERT-and-COMMIT packet meeting a record fails before its
// COMMIT: ErrExists, the transaction still open and holding the row, the business's writes rolled
// back with it.
func TestMultiStatementInsertConflict(t *testing.T) {
	f := multiFixture(t, 4)
	rec := &idemkit.Record{Scope: "c", Key: "k", Status: idemkit.StatusSucceeded, Fence: 1, Owner: "first", Response: []byte("first")}
	must(t, f.store.Insert(ctxb, rec))

	tx, err := f.store.BeginTx(ctxb)
	must(t, err)
	must(t, GormTx(tx).Exec("INSERT INTO "+f.biz+" (k, fence) VALUES ('c', 2)").Error)
	dup := *rec
	dup.Owner, dup.Response, dup.Fence = "second", []byte("second"), 2
	if err := tx.(idemkit.InsertCommitter).InsertCommit(ctxb, &dup); !errors.Is(err, idemkit.ErrExists) {
		t.Fatalf("InsertCommit of a duplicate = %v, want ErrExists", err)
	}
	// Still in the transaction: the locked read sees the record; another writer waits for the row.
	cur, err := tx.Get(ctxb, "c", "k")
	must(t, err)
	if cur.Owner != "first" {
		t.Fatalf("record %+v", cur)
	}
	other, err := f.db.DB()
	must(t, err)
	c, err := other.Conn(ctxb)
	must(t, err)
	defer c.Close()
	_, err = c.ExecContext(ctxb, "SET SESSION innodb_lock_wait_timeout = 1")
	must(t, err)
	if _, err := c.ExecContext(ctxb, "UPDATE "+f.store.q.quoted+" SET owner = 'x' WHERE scope = 'c'"); err == nil {
		t.Fatal("another writer updated the row the transaction holds")
	}
	must(t, c.Close())
	must(t, tx.Rollback())
	if n := bizRows(t, f.db, f.biz, "c"); n != 0 {
		t.Fatalf("%d business rows committed after the conflict", n)
	}
	got, err := f.store.Get(ctxb, "c", "k")
	must(t, err)
	if got.Owner != "first" || got.Fence != 1 {
		t.Fatalf("record after the conflict: %+v", got)
	}
	noOpenTransaction(t, f.db, 4)
}

// TestMultiStatementConnectionsClean: whatever ends a Guard.Tx call — success, a replay, a
// concurrent duplicate's conflict, the function's error or panic, a cancelled context in the middle
// of the business — no connection goes back to the pool inside a transaction, and nothing of an
// interrupted call commits.
func TestMultiStatementConnectionsClean(t *testing.T) {
	const conns = 4
	f := multiFixture(t, conns)
	f.hold = 50 * time.Millisecond
	for _, key := range []string{"ok", "ok"} { // a new key, then its replay
		if _, err := f.txCall(f.guard, "gorm", key, nil); err != nil {
			t.Fatal(err)
		}
	}
	f.hold = 0
	var wg sync.WaitGroup
	for range 6 { // concurrent duplicates without a Locker: the INSERTs meet, one commits
		wg.Go(func() {
			if res, err := f.txCall(f.guard, "gorm", "dup", nil); err != nil && !errors.Is(err, idemkit.ErrInFlight) {
				t.Errorf("duplicate: %+v, %v", res, err)
			}
		})
	}
	wg.Wait()
	f.wantRecord(t, "dup", 1, idemkit.StatusSucceeded)
	if _, err := f.txCall(f.guard, "gorm", "fails", errors.New("boom")); err == nil {
		t.Fatal("failing function: no error")
	}
	f.wantRecord(t, "fails", 0, "")
	if p := recovered(func() { _, _ = f.txCall(f.guard, "gorm", "panics", "boom") }); p == nil {
		t.Fatal("no panic")
	}
	f.wantRecord(t, "panics", 0, "")

	ctx, cancel := context.WithTimeout(ctxb, 200*time.Millisecond)
	defer cancel()
	_, err := f.store.Tx(ctx, f.guard, idemkit.Call{Scope: "gtx", Key: "cancelled"}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
		if err := tx.Exec("INSERT INTO " + f.biz + " (k, fence) VALUES ('cancelled', 1)").Error; err != nil {
			return nil, err
		}
		// Cut by the context. (The server runs the sleep to its end, holding the table: the test's
		// cleanup waits for it.)
		return nil, tx.Exec("DO SLEEP(1)").Error
	})
	if err == nil {
		t.Fatal("cancelled call: no error")
	}
	f.wantRecord(t, "cancelled", 0, "")
	noOpenTransaction(t, f.db, conns)
}

// TestMultiStatementGormSession: the session the business gets is a transaction to gorm — a nested
// db.Transaction is a savepoint that rolls back alone — and committing or rolling it back itself is
// refused: the Guard ends it.
func TestMultiStatementGormSession(t *testing.T) {
	f := multiFixture(t, 4)
	_, err := f.store.Tx(ctxb, f.guard, idemkit.Call{Scope: "gtx", Key: "nested"}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
		if err := tx.Exec("INSERT INTO " + f.biz + " (k, fence) VALUES ('nested', 1)").Error; err != nil {
			return nil, err
		}
		inner := tx.Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec("INSERT INTO " + f.biz + " (k, fence) VALUES ('nested', 2)").Error; err != nil {
				return err
			}
			return errors.New("inner fails")
		})
		if inner == nil {
			return nil, errors.New("nested transaction: no error")
		}
		if err := tx.Commit().Error; err == nil || !strings.Contains(err.Error(), "Guard commits") {
			return nil, errors.New("the business committed the Guard's transaction")
		}
		if err := tx.Rollback().Error; err == nil {
			return nil, errors.New("the business rolled back the Guard's transaction")
		}
		return []byte("ok"), nil
	})
	must(t, err)
	f.wantRecord(t, "nested", 1, idemkit.StatusSucceeded)
	noOpenTransaction(t, f.db, 4)
}

// TestMultiStatementLargeResult: a result too large for a literal packet is written the ordinary way
// (INSERT, then COMMIT) and replayed whole.
func TestMultiStatementLargeResult(t *testing.T) {
	f := multiFixture(t, 4)
	big := bytes.Repeat([]byte("0123456789abcdef"), (maxInlineResult/16)+1024)
	fn := func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
		return big, tx.Exec("INSERT INTO " + f.biz + " (k, fence) VALUES ('big', 1)").Error
	}
	call := idemkit.Call{Scope: "gtx", Key: "big"}
	res, err := f.store.Tx(ctxb, f.guard, call, fn)
	must(t, err)
	if res.Replayed || !bytes.Equal(res.Value, big) {
		t.Fatalf("first call: replayed %v, %d bytes", res.Replayed, len(res.Value))
	}
	res, err = f.store.Tx(ctxb, f.guard, call, fn)
	must(t, err)
	if !res.Replayed || !bytes.Equal(res.Value, big) {
		t.Fatalf("second call: replayed %v, %d bytes", res.Replayed, len(res.Value))
	}
	f.wantRecord(t, "big", 1, idemkit.StatusSucceeded)
	noOpenTransaction(t, f.db, 4)
}

// TestMultiStatementRoundTrips: on a multi-statement pool a guarded transaction costs one round trip
// fewer per packet: with a Locker, START TRANSACTION-and-the-business, the INSERT-and-COMMIT (2
// against 4: one fewer than the bare transaction); without, START TRANSACTION-and-read, the business,
// INSERT-and-COMMIT (3 against 5 — the barrier's 4). A replay without a Locker probes in a
// transaction, then reads and rolls back in one packet (2 against 1). A guard-owned mark (TxMark) is
// START TRANSACTION-and-INSERT, the business, COMMIT (3 against the barrier's 4).
func TestMultiStatementRoundTrips(t *testing.T) {
	db, n := countedDB(t, multiBackend, nil)
	s := newTable(t, db)
	biz := bizTable(t, db)
	noLock, err := idemkit.New(s, nil)
	must(t, err)
	txFn := func(key string) TxFunc {
		return func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
			return []byte("r"), tx.Exec("INSERT INTO "+biz+" (k, fence) VALUES (?, ?)", key, 1).Error
		}
	}
	run := func(key string) sqlcount.Counts {
		return delta(n, func() {
			_, err := s.Tx(ctxb, noLock, idemkit.Call{Scope: "trips", Key: key}, txFn(key))
			must(t, err)
		})
	}
	run("warm") // the Store finds out the pool allows multi-statement packets
	want := func(name string, d sqlcount.Counts, trips, stmts int64) {
		t.Helper()
		if d.RoundTrips != trips || d.Statements != stmts || d.Begins != d.Commits+d.Rollbacks {
			t.Errorf("%s: %+v; want %d round trips, %d statements", name, d, trips, stmts)
		}
	}
	want("Tx without a Locker, new key", run("new"), 3, 3)
	want("Tx without a Locker, replay", run("new"), 2, 2)

	locked, err := idemkit.New(s, &idemkit.Options{Locker: memory.NewLocker(nil)})
	must(t, err)
	d := delta(n, func() {
		_, err := s.Tx(ctxb, locked, idemkit.Call{Scope: "trips", Key: "locked"}, txFn("locked"))
		must(t, err)
	})
	want("Tx with a Locker, new key", d, 2, 2)

	// TxMark: START TRANSACTION-and-the-mark, the business, COMMIT (3 against the barrier's 4); a
	// duplicate's mark conflicts, it reads the record and rolls back.
	mark := func(key string) (sqlcount.Counts, error) {
		var err error
		d := delta(n, func() {
			err = s.TxMark(ctxb, noLock, idemkit.Call{Scope: "trips", Key: key}, func(ctx context.Context, tx *gorm.DB) error {
				return tx.Exec("INSERT INTO "+biz+" (k, fence) VALUES (?, ?)", key, 1).Error
			})
		})
		return d, err
	}
	d, err = mark("mark")
	must(t, err)
	want("TxMark without a Locker, new key", d, 3, 2)
	d, err = mark("mark")
	if !errors.Is(err, idemkit.ErrDuplicate) {
		t.Fatalf("TxMark duplicate: %v, want ErrDuplicate", err)
	}
	want("TxMark without a Locker, duplicate", d, 3, 2)
}

// TestMultiStatementDeferredBegin: START TRANSACTION leaves with the transaction's first statement,
// and the transaction is one whatever that statement is or how it fails: every business below makes
// its first statement in a way that could keep START TRANSACTION from running (arguments the driver
// cannot interpolate and prepares instead, an argument database/sql refuses before sending anything,
// a statement the server refuses, a syntax error, a query, rows, a prepare), then one good INSERT, then
// fails — and nothing may commit — or succeeds, and both commit with the record. On a pool that does
// not interpolate, statements with arguments get START TRANSACTION on its own.
func TestMultiStatementDeferredBegin(t *testing.T) {
	pools := []struct {
		name string
		db   *gorm.DB
	}{
		{"interpolating", testsvc.MySQLMulti(t, nil)},
		{"prepared", testsvc.MySQLWith(t, nil, "&multiStatements=true")},
	}
	for _, p := range pools {
		t.Run(p.name, func(t *testing.T) {
			f := newTxFixtureOn(t, p.db)
			sqlDB, err := f.db.DB()
			must(t, err)
			sqlDB.SetMaxOpenConns(4)
			sqlDB.SetMaxIdleConns(4)
			// With a Locker the Guard reads nothing before the function: the transaction begins with
			// the function's first statement.
			g, err := idemkit.New(f.store, &idemkit.Options{Locker: memory.NewLocker(nil)})
			must(t, err)
			insert := "INSERT INTO " + f.biz + " (k, fence) VALUES (?, 1)"
			firsts := map[string]func(ctx context.Context, tx *gorm.DB, key string) error{
				"no arguments": func(ctx context.Context, tx *gorm.DB, key string) error {
					return tx.Exec("DO 1").Error
				},
				"a '?' in a literal (the driver prepares)": func(ctx context.Context, tx *gorm.DB, key string) error {
					_, err := tx.Statement.ConnPool.ExecContext(ctx, "DO LENGTH('?'), ?", 1)
					return err
				},
				"an argument database/sql refuses": func(ctx context.Context, tx *gorm.DB, key string) error {
					if _, err := tx.Statement.ConnPool.ExecContext(ctx, "DO ?", make(chan int)); err == nil {
						return errors.New("a chan argument was accepted")
					}
					return nil
				},
				"a statement the server refuses": func(ctx context.Context, tx *gorm.DB, key string) error {
					if err := tx.Exec("INSERT INTO no_such_table_idemkit (k) VALUES (?)", key).Error; err == nil {
						return errors.New("no error from a missing table")
					}
					return nil
				},
				"a syntax error with arguments": func(ctx context.Context, tx *gorm.DB, key string) error {
					if err := tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, 1", key).Error; err == nil {
						return errors.New("no error from a syntax error")
					}
					return nil
				},
				"rows with a '?' in a literal": func(ctx context.Context, tx *gorm.DB, key string) error {
					rows, err := tx.Statement.ConnPool.QueryContext(ctx, "SELECT LENGTH('?') + ?", 1)
					if err != nil {
						return err
					}
					return rows.Close()
				},
				"a query": func(ctx context.Context, tx *gorm.DB, key string) error {
					var n int
					return tx.Raw("SELECT COUNT(*) FROM "+f.biz+" WHERE k = ?", key).Scan(&n).Error
				},
				"a row": func(ctx context.Context, tx *gorm.DB, key string) error {
					var n int
					return tx.Raw("SELECT COUNT(*) FROM "+f.biz+" WHERE k = ?", key).Row().Scan(&n)
				},
				"a row with a '?' in a literal": func(ctx context.Context, tx *gorm.DB, key string) error {
					var n int
					return tx.Statement.ConnPool.QueryRowContext(ctx, "SELECT LENGTH('?') + ?", 1).Scan(&n)
				},
				"a prepare": func(ctx context.Context, tx *gorm.DB, key string) error {
					st, err := tx.Statement.ConnPool.PrepareContext(ctx, "DO ?")
					if err != nil {
						return err
					}
					return st.Close()
				},
			}
			i := 0
			for name, first := range firsts {
				for _, fails := range []bool{true, false} {
					i++
					key := "first-" + strconv.Itoa(i)
					_, err := f.store.Tx(ctxb, g, idemkit.Call{Scope: "gtx", Key: key}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
						if err := first(ctx, tx, key); err != nil {
							return nil, err
						}
						if err := tx.Exec(insert, key).Error; err != nil {
							return nil, err
						}
						if fails {
							return nil, errors.New("business fails")
						}
						return []byte("ok"), nil
					})
					switch {
					case fails && err == nil:
						t.Fatalf("%s, failing: no error", name)
					case fails:
						f.wantRecord(t, key, 0, "")
					case err != nil:
						t.Fatalf("%s: %v", name, err)
					default:
						f.wantRecord(t, key, 1, idemkit.StatusSucceeded)
					}
				}
			}
			noOpenTransaction(t, f.db, 4)
		})
	}
}

// TestMultiStatementConcurrentFirstStatements: statements the business sends at once, before its
// transaction began, begin it once: a second START TRANSACTION would commit what the first carried.
func TestMultiStatementConcurrentFirstStatements(t *testing.T) {
	f := multiFixture(t, 4)
	g, err := idemkit.New(f.store, &idemkit.Options{Locker: memory.NewLocker(nil)})
	must(t, err)
	const parallel = 4
	for i := range 20 {
		key := "parallel-" + strconv.Itoa(i)
		fails := i%2 == 0
		_, err := f.store.Tx(ctxb, g, idemkit.Call{Scope: "gtx", Key: key}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
			var wg sync.WaitGroup
			errs := make([]error, parallel)
			for j := range parallel {
				wg.Go(func() { errs[j] = tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, ?)", key, j).Error })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return nil, err
			}
			if fails {
				return nil, errors.New("business fails")
			}
			return []byte("ok"), nil
		})
		switch {
		case fails && err == nil:
			t.Fatal("failing business: no error")
		case fails:
			f.wantRecord(t, key, 0, "")
		case err != nil:
			t.Fatal(err)
		default:
			f.wantRecord(t, key, parallel, idemkit.StatusSucceeded)
		}
	}
	noOpenTransaction(t, f.db, 4)
}

// TestMultiStatementNoStatement: a guarded function that sends nothing leaves one packet, START
// TRANSACTION with the record's INSERT and the COMMIT.
func TestMultiStatementNoStatement(t *testing.T) {
	db, n := countedDB(t, multiBackend, nil)
	s := newTable(t, db)
	g, err := idemkit.New(s, &idemkit.Options{Locker: memory.NewLocker(nil)})
	must(t, err)
	fn := func(ctx context.Context, tx *gorm.DB) ([]byte, error) { return []byte("r"), nil }
	_, err = s.Tx(ctxb, g, idemkit.Call{Scope: "none", Key: "warm"}, fn)
	must(t, err)
	d := delta(n, func() {
		_, err := s.Tx(ctxb, g, idemkit.Call{Scope: "none", Key: "k"}, fn)
		must(t, err)
	})
	if d.RoundTrips != 1 || d.Begins != 1 || d.Commits != 1 || d.Statements != 1 {
		t.Errorf("counted %+v; want one round trip: START TRANSACTION, the INSERT, COMMIT", d)
	}
	rec, err := s.Get(ctxb, "none", "k")
	must(t, err)
	if rec.Status != idemkit.StatusSucceeded || string(rec.Response) != "r" {
		t.Fatalf("record %+v", rec)
	}
}

// TestInsertCommitPacketOneAllocation: the INSERT-and-COMMIT packet is built in one allocation (its
// size is known before it is written).
func TestInsertCommitPacketOneAllocation(t *testing.T) {
	q := buildQueries(dialectMySQL, "", DefaultTable)
	now := time.Now()
	rec := &idemkit.Record{Scope: "POST /orders", Key: "0f8fad5b-d9cb-469f-a165-70867728950e", Status: idemkit.StatusSucceeded,
		Fence: 123456789, Owner: strings.Repeat("o", maxOwner), Fingerprint: strings.Repeat("f", maxText), GID: "gid", BranchID: "01",
		Response: []byte(`{"order":42,"status":"paid"}`), Error: "an error text with é", LeaseUntil: now, ExpiresAt: now.Add(time.Hour),
		CreatedAt: now, UpdatedAt: now}
	if n := testing.AllocsPerRun(100, func() { _ = q.insertCommit(rec) }); n != 1 {
		t.Errorf("insertCommit: %v allocations, want 1", n)
	}
}

// fuzzInput skips inputs the Store refuses before any statement (an empty or too long scope, a result
// too large for a literal, a long text) and returns key made unique (each input once, whatever the
// fuzzer repeats) and cut to what a key may hold.
func fuzzInput(t *testing.T, n *atomic.Int64, scope, key string, result []byte, text string) string {
	if scope == "" || len(scope) > idemkit.MaxStoredLen || len(result) > maxInlineResult || len(text) > 4096 {
		t.Skip()
	}
	key = strconv.FormatInt(n.Add(1), 10) + "/" + key
	if len(key) > idemkit.MaxStoredLen {
		key = key[:idemkit.MaxStoredLen]
	}
	return key
}

// FuzzMultiStatementLiterals: whatever the scope, key, result and error text, the packets of a
// multi-statement transaction store and read them back byte for byte — or, for text that is not
// UTF-8, the INSERT is refused as unstorable and nothing commits.
func FuzzMultiStatementLiterals(f *testing.F) {
	f.Add("scope", "key", []byte("result"), "")
	f.Add("s'c\\", "k\"ey;'); COMMIT; --", []byte{0, 0xff, '\'', ';'}, "l'erreur é \\")
	f.Add("x", "\xff\xfe", []byte{}, "\xff")
	db := multiBackend.db(f, nil)
	s := newTable(f, db)
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, scope, key string, result []byte, text string) {
		key = fuzzInput(t, &n, scope, key, result, text)
		rec := &idemkit.Record{Scope: scope, Key: key, Status: idemkit.StatusSucceeded, Fence: 1, Owner: "o",
			Response: result, Error: text, UpdatedAt: time.UnixMilli(1_700_000_000_000)}
		tx, cur, err := s.BeginTxGet(ctxb, scope, key)
		if !errors.Is(err, idemkit.ErrNotFound) || tx == nil {
			t.Fatalf("BeginTxGet of a new key: %v, %+v, %v", tx, cur, err)
		}
		err = tx.(idemkit.InsertCommitter).InsertCommit(ctxb, rec)
		if !utf8.ValidString(text) {
			if !errors.Is(err, idemkit.ErrUnstorable) {
				t.Fatalf("text %q: %v, want ErrUnstorable", text, err)
			}
			must(t, tx.Rollback())
			if _, err := s.Get(ctxb, scope, key); !errors.Is(err, idemkit.ErrNotFound) {
				t.Fatalf("refused record committed: %v", err)
			}
			return
		}
		must(t, err)
		// Read back with bound parameters (Get) and with literals (BeginTxGet): both find the row the
		// literals wrote, so its key is byte for byte the one given.
		if bound, err := s.Get(ctxb, scope, key); err != nil || !bytes.Equal(bound.Response, rec.Response) || bound.Error != text {
			t.Fatalf("Get after InsertCommit: %+v, %v", bound, err)
		}
		tx, got, err := s.BeginTxGet(ctxb, scope, key)
		must(t, err)
		if tx != nil {
			t.Fatal("BeginTxGet of a recorded key left a transaction open")
		}
		if got.Scope != scope || got.Key != key || !bytes.Equal(got.Response, rec.Response) && len(rec.Response)+len(got.Response) > 0 ||
			got.Error != text || got.Owner != "o" || got.Fence != 1 {
			t.Fatalf("stored %q/%q %q %q, read back %q/%q %q %q", scope, key, result, text, got.Scope, got.Key, got.Response, got.Error)
		}
	})
}
