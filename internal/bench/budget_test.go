package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

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
	redis       int64 // Redis commands, exactly; -1 to skip
	maxRedis    int64 // upper bound when redis is -1
	stmts       int64 // SQL statements, business statement included
	begins      int64 // transactions (BEGIN ... COMMIT): the business's own
	outsideGorm bool  // statements gorm does not see (DTM's dtmcli uses database/sql)
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
	if d.Redis.RoundTrips != d.Redis.Commands {
		t.Errorf("%s: %d Redis round trips for %d commands", name, d.Redis.RoundTrips, d.Redis.Commands)
	}
	if d.Redis.Evals != 0 {
		t.Errorf("%s: %d EVAL (script sent in full): scripts should have been warm", name, d.Redis.Evals)
	}
	if d.SQL.Statements != want.stmts {
		t.Errorf("%s: %d SQL statements, want %d", name, d.SQL.Statements, want.stmts)
	}
	if d.SQL.Begins != want.begins || d.SQL.Commits != want.begins || d.SQL.Rollbacks != 0 {
		t.Errorf("%s: %d BEGIN, %d COMMIT, %d ROLLBACK, want %d transactions", name, d.SQL.Begins, d.SQL.Commits, d.SQL.Rollbacks, want.begins)
	}
	if d.SQL.Prepares != 0 {
		t.Errorf("%s: %d prepares with interpolateParams=true", name, d.SQL.Prepares)
	}
	if !want.outsideGorm && d.Gorm != d.SQL.Statements {
		t.Errorf("%s: gorm callbacks saw %d statements, the driver %d", name, d.Gorm, d.SQL.Statements)
	}
	t.Logf("%-34s Redis %d, SQL %d (BEGIN/COMMIT %d)", name, d.Redis.Commands, d.SQL.Statements, d.SQL.Begins)
}

// TestRoundTripBudget asserts the round trips of DESIGN.md ("The fast path and the round-trip budget")
// for every mode, counted at the same time by a go-redis hook and at the MySQL driver (cross-checked
// with gorm callbacks), on the very operations the benchmark runs. Every variant's business
// transaction is one INSERT (BEGIN, INSERT, COMMIT), so "SQL" below is the guard's statements + 1.
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

	// Warm every script: idemkit's acquire and release (a new key), the classic lock and unlock.
	for _, v := range []string{VExecute, VClassic} {
		if err := op(v, 1000)(); err != nil {
			t.Fatalf("warming %s: %v", v, err)
		}
	}

	t.Run("Execute", func(t *testing.T) {
		d, err := measure(e, op(VExecute, 0))
		check(t, "new key", d, err, budget{redis: 2, stmts: 2 + 1, begins: 1})
		d, err = measure(e, op(VExecute, 0))
		check(t, "cached replay", d, err, budget{redis: 1, stmts: 0})
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
		check(t, "uncached replay", d, err, budget{redis: 2, stmts: 2})
		if !res.Replayed {
			t.Error("uncached replay did not replay")
		}
		t.Log("  (acquire misses the cache and locks; conflicting insert; read; release fills the cache)")
		d, err = measure(e, func() error { res, err = withLock.Do(ctxb, call, failIfRun); return err })
		check(t, "replay after the cache fill", d, err, budget{redis: 1, stmts: 0})
	})

	t.Run("Tx", func(t *testing.T) {
		g, err := e.Guard(nil, false, time.Hour)
		must(t, err)
		call := idemkit.Call{Scope: "budget/tx", Key: e.Run + "-tx"}
		var inside Counts
		d, err := measure(e, func() error {
			return e.Gorm.Transaction(func(tx *gorm.DB) error {
				var err error
				inside, err = measure(e, func() error {
					_, err := g.DoTx(ctxb, e.Store.WithTx(tx), call, func(context.Context) ([]byte, error) {
						return result, tx.Exec(e.InsertBiz, call.Key, 1).Error
					})
					return err
				})
				return err
			})
		})
		check(t, "Tx mode, whole transaction", d, err, budget{redis: -1, maxRedis: 2, stmts: 2 + 1, begins: 1})
		if inside.SQL.Statements != 2+1 || inside.SQL.Begins != 0 || inside.SQL.Commits != 0 {
			t.Errorf("Tx mode: %d statements inside the caller's transaction, want 1 (business) + 2 (claim, finish)", inside.SQL.Statements)
		} else {
			t.Logf("%-34s 2 statements + the business's 1, all between its BEGIN and COMMIT", "Tx mode, inside the transaction")
		}
		// The benchmark's own Tx variant costs the same.
		d, err = measure(e, op(VTx, 0))
		check(t, "Tx mode (benchmark variant)", d, err, budget{redis: -1, maxRedis: 2, stmts: 2 + 1, begins: 1})
	})

	t.Run("Mark", func(t *testing.T) {
		d, err := measure(e, op(VMark, 0))
		check(t, "Mark, new key", d, err, budget{redis: -1, maxRedis: 2, stmts: 1 + 1, begins: 1})
		d, err = measure(e, op(VMark, 0))
		if !errors.Is(err, idemkit.ErrDuplicate) {
			t.Fatalf("Mark duplicate: %v, want ErrDuplicate", err)
		}
		check(t, "Mark, duplicate (cached)", d, nil, budget{redis: 1, stmts: 0})
	})

	t.Run("MarkTx", func(t *testing.T) {
		d, err := measure(e, op(VMarkTx, 0))
		check(t, "MarkTx, new key", d, err, budget{redis: -1, maxRedis: 2, stmts: 1 + 1, begins: 1})
		d, err = measure(e, op(VMarkTxNoLock, 0))
		check(t, "MarkTx without Locker, new key", d, err, budget{redis: 0, stmts: 1 + 1, begins: 1})
	})

	t.Run("HTTP", func(t *testing.T) {
		must(t, vs[VHTTPGuarded].Setup(ctxb))
		srv := e.HTTP()
		key := e.Run + "-http-budget"
		d, err := measure(e, func() error { return srv.Post(ctxb, pathGuarded, key, false) })
		check(t, "httpx, new key", d, err, budget{redis: 2, stmts: 2 + 1, begins: 1})
		d, err = measure(e, func() error { return srv.Post(ctxb, pathGuarded, key, true) })
		check(t, "httpx, cached replay", d, err, budget{redis: 1, stmts: 0})
		d, err = measure(e, func() error { return srv.Post(ctxb, pathBare, key, false) })
		check(t, "bare handler", d, err, budget{redis: 0, stmts: 1, begins: 1})
	})

	// What the other variants cost, for the report.
	t.Run("Others", func(t *testing.T) {
		d, err := measure(e, op(VBare, 0))
		check(t, "bare transaction", d, err, budget{redis: 0, stmts: 1, begins: 1})
		d, err = measure(e, op(VClassic, 0))
		check(t, "classic, new key", d, err, budget{redis: 4, stmts: 2 + 1, begins: 1})
		d, err = measure(e, op(VClassic, 0))
		check(t, "classic, cached replay", d, err, budget{redis: 1, stmts: 0})
		d, err = measure(e, op(VDTM, 0))
		check(t, "DTM dtmcli barrier (saga action)", d, err, budget{redis: 0, stmts: 1 + 1, begins: 1, outsideGorm: true})
		d, err = measure(e, op(VDTM, 0))
		check(t, "DTM dtmcli barrier, duplicate", d, err, budget{redis: 0, stmts: 1, begins: 1, outsideGorm: true})
		d, err = measure(e, op(VBarrier, 0))
		check(t, "idemkit barrier (saga action)", d, err, budget{redis: 0, stmts: 1 + 1, begins: 1, outsideGorm: true})
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
