package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

var ctxb = context.Background()

// setup opens an Env on the test services (fails under IDEMKIT_REQUIRE_SERVICES=1 when they are
// missing, skips otherwise) and builds the variants; everything is dropped when t ends.
func setup(t *testing.T) (*Env, map[string]*Variant) {
	t.Helper()
	e, err := Open(ctxb, nil)
	if err != nil {
		testsvc.Unavailable(t, "MariaDB and Redis", err)
	}
	t.Cleanup(func() {
		if err := e.Close(ctxb); err != nil {
			t.Logf("cleaning up: %v", err)
		}
	})
	vs, err := Variants(e)
	if err != nil {
		t.Fatal(err)
	}
	return e, vs
}

// measure returns what f sent to MariaDB and Redis, both counters live at once.
func measure(e *Env, f func() error) (Counts, error) {
	c0 := e.Counts()
	err := f()
	return e.Counts().Sub(c0), err
}

type budget struct {
	redis    int64 // Redis commands, exactly; -1 to skip
	maxRedis int64 // upper bound when redis is -1
	scripts  int64 // Redis commands running a Lua script (EVALSHA, EVAL), exactly; -1 to skip
	stmts    int64 // SQL statements, business statement included
	inTx     int64 // of which inside a transaction; -1 to skip
	begins   int64 // transactions (BEGIN ... COMMIT or ROLLBACK): the business's own
	rolled   int64 // of which rolled back
	trips    int64 // SQL round trips (a packet of two statements is one); 0 to skip
	gorm     int64 // statements gorm's callbacks see: the business's (the record Store's bypass gorm); -1 to skip
}

func check(t *testing.T, name string, d Counts, err error, want budget) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	switch {
	case want.redis >= 0 && d.Redis.Commands != want.redis:
		t.Errorf("%s: %d Redis commands, want %d", name, d.Redis.Commands, want.redis)
	case want.redis < 0 && d.Redis.Commands > want.maxRedis:
		t.Errorf("%s: %d Redis commands, want at most %d", name, d.Redis.Commands, want.maxRedis)
	}
	if want.scripts >= 0 && d.Redis.Scripts != want.scripts {
		t.Errorf("%s: %d Lua scripts (EVALSHA/EVAL), want %d", name, d.Redis.Scripts, want.scripts)
	}
	if d.Redis.RoundTrips != d.Redis.Commands {
		t.Errorf("%s: %d Redis round trips for %d commands", name, d.Redis.RoundTrips, d.Redis.Commands)
	}
	if d.Redis.Evals != 0 {
		t.Errorf("%s: %d EVAL (script sent in full): scripts should have been warm", name, d.Redis.Evals)
	}
	if d.SQL.Statements != want.stmts {
		t.Errorf("%s: %d SQL statements, want %d", name, d.SQL.Statements, want.stmts)
	}
	if want.inTx >= 0 && d.SQL.InTx != want.inTx {
		t.Errorf("%s: %d SQL statements inside the transaction, want %d", name, d.SQL.InTx, want.inTx)
	}
	if d.SQL.Begins != want.begins || d.SQL.Commits != want.begins-want.rolled || d.SQL.Rollbacks != want.rolled {
		t.Errorf("%s: %d BEGIN, %d COMMIT, %d ROLLBACK, want %d transactions, %d rolled back", name, d.SQL.Begins, d.SQL.Commits,
			d.SQL.Rollbacks, want.begins, want.rolled)
	}
	if want.trips > 0 && d.SQL.RoundTrips != want.trips {
		t.Errorf("%s: %d SQL round trips, want %d", name, d.SQL.RoundTrips, want.trips)
	}
	if d.SQL.Prepares != 0 {
		t.Errorf("%s: %d prepares: none is needed with interpolateParams=true, nor once the Store's statements are prepared", name, d.SQL.Prepares)
	}
	if want.gorm >= 0 && d.Gorm != want.gorm {
		t.Errorf("%s: gorm callbacks saw %d statements, want %d (the business's only)", name, d.Gorm, want.gorm)
	}
	t.Logf("%-36s Redis %d (%d scripts), SQL %d (%d in the transaction; BEGIN %d; %d round trips)", name, d.Redis.Commands,
		d.Redis.Scripts, d.SQL.Statements, d.SQL.InTx, d.SQL.Begins, d.SQL.RoundTrips)
}

// TestRoundTripBudget asserts the round trips of the write path v2 for every mode, counted at the same
// time by a go-redis hook and at the MySQL driver, on the very operations the benchmark runs. Every
// variant's business transaction is one INSERT (BEGIN, INSERT, COMMIT), so "SQL" below is the guard's
// statements + 1. The record Store's statements run on database/sql, so gorm's callbacks see the
// business's statement only.
//
// The budget: Tx mode, new key: the record is one INSERT added to the business's transaction, and
// nothing else touches the database (the Locker's cache vouches for new keys); a cached replay is one
// native Redis command (SET ... NX ... GET), no script; Execute mode, new key: two statements.
//
// Lua scripts are warmed first: Redis caches scripts server-wide, and on a fresh server (or after
// SCRIPT FLUSH) go-redis's EVALSHA fails with NOSCRIPT and is retried as EVAL — two commands, once
// per script and server. The test runs each script once, then asserts no EVAL is sent.
func TestRoundTripBudget(t *testing.T) {
	e, vs := setup(t)
	op := func(name string, seq int) func() error {
		w := &Worker{Seq: seq, pfx: []byte(e.Run + "-budget-" + name + "-")}
		return func() error { return vs[name].Op(ctxb, w) }
	}

	// Warm every script: idemkit's compare-and-delete release (MarkTx), the classic lock and unlock.
	// Warm the execute-lean pool's prepared statements too, and let the record Store's first
	// transaction ask the server whether it takes multi-statement packets (one statement, once).
	for _, v := range []string{VMarkTx, VClassic, VExecute, VExecLean, VTx} {
		if err := op(v, 1000)(); err != nil {
			t.Fatalf("warming %s: %v", v, err)
		}
	}
	const biz = 1 // the business's INSERT, in every write variant

	t.Run("Execute", func(t *testing.T) {
		d, err := measure(e, op(VExecute, 0))
		check(t, "new key", d, err, budget{redis: 2, scripts: 0, stmts: 2 + biz, inTx: biz, begins: 1, gorm: biz})
		d, err = measure(e, op(VExecute, 0))
		check(t, "cached replay", d, err, budget{redis: 1, scripts: 0, stmts: 0, begins: 0, gorm: 0})
		d, err = measure(e, op(VExecLean, 0))
		check(t, "new key, prepared statements", d, err, budget{redis: 2, scripts: 0, stmts: 2 + biz, inTx: biz, begins: 1, gorm: biz})
	})

	t.Run("UncachedReplay", func(t *testing.T) {
		// Finish a key without a Locker, so nothing is cached, then replay it through the Redis Guard.
		noLock, err := e.Guard(nil, true, time.Hour)
		must(t, err)
		withLock, err := e.Guard(nil, false, time.Hour)
		must(t, err)
		call := idemkit.Call{Scope: "budget/uncached", Key: e.Run + "-uncached"}
		fn := func(context.Context) ([]byte, error) { return result, nil }
		_, err = noLock.Do(ctxb, call, fn)
		must(t, err)
		var res idemkit.Result
		d, err := measure(e, func() error { res, err = withLock.Do(ctxb, call, failIfRun); return err })
		check(t, "uncached replay", d, err, budget{redis: 2, scripts: 0, stmts: 2, inTx: 0, gorm: 0})
		if !res.Replayed {
			t.Error("uncached replay did not replay")
		}
		t.Log("  (acquire misses the cache and locks; conflicting insert; read; the release fills the cache)")
		d, err = measure(e, func() error { res, err = withLock.Do(ctxb, call, failIfRun); return err })
		check(t, "replay after the cache fill", d, err, budget{redis: 1, scripts: 0, stmts: 0, gorm: 0})
	})

	t.Run("Tx", func(t *testing.T) {
		// The pool allows multi-statement packets (DefaultDSNParams): the Guard-owned transaction
		// sends the record's INSERT with the COMMIT, and without a Locker begins with the read.
		d, err := measure(e, op(VTx, 0))
		check(t, "Tx mode, new key", d, err, budget{redis: 2, scripts: 0, stmts: 1 + biz, inTx: 1 + biz, begins: 1, trips: biz + 1, gorm: biz})
		t.Log("  (START TRANSACTION and the business's first statement in one packet; the record's INSERT and COMMIT in one packet: one round trip fewer than the bare transaction)")
		d, err = measure(e, op(VTx, 0))
		check(t, "Tx mode, cached replay", d, err, budget{redis: 1, scripts: 0, stmts: 0, begins: 0, gorm: 0})
		d, err = measure(e, op(VTxNoLock, 0))
		check(t, "Tx without Locker, new key", d, err, budget{redis: 0, scripts: 0, stmts: 1 + 1 + biz, inTx: 1 + 1 + biz, begins: 1, trips: 1 + biz + 1, gorm: biz})
		t.Log("  (START TRANSACTION and a probe for the record in one packet: without a cache, a finished key is answered before the business runs; the business; INSERT and COMMIT)")
		d, err = measure(e, op(VTxNoLock, 0))
		check(t, "Tx without Locker, replay", d, err, budget{redis: 0, scripts: 0, stmts: 2, inTx: 1, begins: 1, rolled: 1, trips: 2, gorm: 0})
		t.Log("  (the probe finds the record: ROLLBACK and the record's read in one packet, replay)")
		// The raw-SQL variants (rawsql.go) send the same statements and round trips to MariaDB, without
		// idemkit or Redis: what makes them the bound of the two variants above.
		d, err = measure(e, op(VSQLTx, 0))
		check(t, "raw SQL of Tx mode, new key", d, err, budget{redis: 0, scripts: 0, stmts: 1 + biz, inTx: 1 + biz, begins: 1, trips: biz + 1, gorm: 0})
		d, err = measure(e, op(VSQLTxProbe, 0))
		check(t, "raw SQL of Tx without Locker, new key", d, err, budget{redis: 0, scripts: 0, stmts: 1 + 1 + biz, inTx: 1 + 1 + biz, begins: 1, trips: 1 + biz + 1, gorm: 0})
		d, err = measure(e, op(VTxLean, 0))
		check(t, "DoTx (caller's transaction), new key", d, err, budget{redis: 2, scripts: 1, stmts: 2 + biz, inTx: 2 + biz, begins: 1, gorm: biz})
		t.Log("  (a read without a lock, then the record, in the caller's transaction; the release deletes the lock: no cache fill before the caller commits)")
	})

	t.Run("Mark", func(t *testing.T) {
		d, err := measure(e, op(VMark, 0))
		check(t, "Mark, new key", d, err, budget{redis: 2, scripts: 0, stmts: 1 + biz, inTx: biz, begins: 1, gorm: biz})
		d, err = measure(e, op(VMark, 0))
		if !errors.Is(err, idemkit.ErrDuplicate) {
			t.Fatalf("Mark duplicate: %v, want ErrDuplicate", err)
		}
		check(t, "Mark, duplicate (cached)", d, nil, budget{redis: 1, scripts: 0, stmts: 0, gorm: 0})
	})

	t.Run("MarkTx", func(t *testing.T) {
		// Guard-owned (TxMark): START TRANSACTION and the mark in one packet, the business, COMMIT.
		d, err := measure(e, op(VMarkTx, 0))
		check(t, "TxMark, new key", d, err, budget{redis: 2, scripts: 0, stmts: 1 + biz, inTx: 1 + biz, begins: 1, trips: 1 + biz + 1, gorm: biz})
		d, err = measure(e, op(VMarkTxNoLock, 0))
		check(t, "TxMark without Locker, new key", d, err, budget{redis: 0, scripts: 0, stmts: 1 + biz, inTx: 1 + biz, begins: 1, trips: 1 + biz + 1, gorm: biz})
		d, err = measure(e, op(VMarkTxCaller, 0))
		check(t, "MarkTx in the caller's transaction, new key", d, err, budget{redis: 0, scripts: 0, stmts: 1 + biz, inTx: 1 + biz, begins: 1, trips: 2 + 1 + biz, gorm: biz})
	})

	t.Run("HTTP", func(t *testing.T) {
		must(t, vs[VHTTPGuarded].Setup(ctxb))
		srv := e.HTTP()
		key := e.Run + "-http-budget"
		d, err := measure(e, func() error { return srv.Post(ctxb, pathGuarded, key, false) })
		check(t, "httpx, new key", d, err, budget{redis: 2, scripts: 0, stmts: 2 + biz, inTx: -1, begins: 1, gorm: biz})
		d, err = measure(e, func() error { return srv.Post(ctxb, pathGuarded, key, true) })
		check(t, "httpx, cached replay", d, err, budget{redis: 1, scripts: 0, stmts: 0, inTx: -1, gorm: 0})
		d, err = measure(e, func() error { return srv.Post(ctxb, pathBare, key, false) })
		check(t, "bare handler", d, err, budget{redis: 0, scripts: 0, stmts: 1, inTx: -1, begins: 1, gorm: 1})
	})

	// What the other variants cost, for the report.
	t.Run("Others", func(t *testing.T) {
		d, err := measure(e, op(VBare, 0))
		check(t, "bare transaction", d, err, budget{redis: 0, scripts: 0, stmts: 1, inTx: 1, begins: 1, gorm: 1})
		d, err = measure(e, op(VClassic, 0))
		check(t, "classic, new key", d, err, budget{redis: 4, scripts: 2, stmts: 2 + 1, inTx: 1, begins: 1, gorm: 3})
		d, err = measure(e, op(VClassic, 0))
		check(t, "classic, cached replay", d, err, budget{redis: 1, scripts: 0, stmts: 0, gorm: 0})
		d, err = measure(e, op(VDTM, 0))
		check(t, "DTM dtmcli barrier (saga action)", d, err, budget{redis: 0, scripts: 0, stmts: 1 + 1, inTx: 2, begins: 1, gorm: -1})
		d, err = measure(e, op(VDTM, 0))
		check(t, "DTM dtmcli barrier, duplicate", d, err, budget{redis: 0, scripts: 0, stmts: 1, inTx: 1, begins: 1, gorm: -1})
		d, err = measure(e, op(VBarrier, 0))
		check(t, "idemkit barrier (saga action)", d, err, budget{redis: 0, scripts: 0, stmts: 1 + 1, inTx: 2, begins: 1, gorm: -1})
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
