package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/record"
)

// Worker is one load goroutine's state, handed to every Op it runs. It is not safe for concurrent use.
type Worker struct {
	ID  int
	Seq int // operations this worker started in the segment, from 0
	pfx []byte
}

// Key returns a key unique to this run, segment, worker and operation.
func (w *Worker) Key() string {
	b := strconv.AppendInt(w.pfx, int64(w.Seq), 10)
	return string(b)
}

// pick spreads the workers over n replayed keys.
func (w *Worker) pick(n int) int { return (w.ID*97 + w.Seq) % n }

// Op is one request of a variant.
type Op func(ctx context.Context, w *Worker) error

// Variant is one way of running the business operation.
type Variant struct {
	Name  string
	Group string // "write", "replay" or "http"
	What  string // one line for the report
	// Setup runs once before the variant's first segment (finishing the keys a replay variant
	// replays). It may be nil.
	Setup func(ctx context.Context) error
	Op    Op
}

// Names of the variants; see [Variants] for what each does.
const (
	VBare          = "bare"
	VBareSQL       = "bare-sql"
	VTx            = "tx"
	VExecute       = "execute"
	VMark          = "mark"
	VMarkTx        = "mark-tx"
	VMarkTxNoLock  = "mark-tx-nolock"
	VDTM           = "dtm-barrier"
	VBarrier       = "idemkit-barrier"
	VClassic       = "classic"
	VReplay        = "replay"
	VClassicReplay = "classic-replay"
	VHTTPBare      = "http-bare"
	VHTTPGuarded   = "http-guarded"
	VHTTPReplay    = "http-replay"
	// Optional variants, not in DefaultVariants.
	VTxNoLock     = "tx-nolock"
	VReplayDB     = "replay-uncached"
	VBarePS       = "bare+ps"
	VTxPS         = "tx+ps"
	VExecutePS    = "execute+ps"
	VClassicPS    = "classic+ps"
	VReplayDBPS   = "replay-uncached+ps"
	VExecNoLock   = "execute-nolock"
	VExecLean     = "execute-lean"
	VTxLean       = "tx-lean"
	VMarkTxCaller = "mark-tx-caller"
	VSQLTx        = "sql-tx"       // rawsql.go
	VSQLTxProbe   = "sql-tx-probe" // rawsql.go
)

// DefaultVariants are run when the command is not told otherwise, in this order within each round.
var DefaultVariants = []string{VBare, VBareSQL, VTx, VTxNoLock, VTxLean, VExecute, VExecLean, VMark, VMarkTx, VMarkTxNoLock, VMarkTxCaller, VDTM, VBarrier, VClassic,
	VReplay, VClassicReplay, VHTTPBare, VHTTPGuarded, VHTTPReplay}

// replayKeys is how many finished keys a replay variant cycles through.
const replayKeys = 1024

// Cache lifetimes: new keys' results are not replayed by the benchmark, so they expire soon and keep
// Redis small; the replayed keys must outlive the run.
const (
	newKeyCacheTTL = 2 * time.Minute
	replayCacheTTL = time.Hour
)

var result = []byte(`{"order":"created","amount":1}`)

// Variants builds every variant on e. Call Env.Close to remove what they write.
func Variants(e *Env) (map[string]*Variant, error) {
	gExec, err := e.Guard(nil, false, newKeyCacheTTL)
	if err != nil {
		return nil, err
	}
	gExecPS, err := e.Guard(e.StorePS, false, newKeyCacheTTL)
	if err != nil {
		return nil, err
	}
	gPrep, err := e.Guard(e.StorePrep, false, newKeyCacheTTL)
	if err != nil {
		return nil, err
	}
	gNoLock, err := e.Guard(nil, true, newKeyCacheTTL)
	if err != nil {
		return nil, err
	}
	gReplay, err := e.Guard(nil, false, replayCacheTTL)
	if err != nil {
		return nil, err
	}
	gNoCache, err := e.Guard(nil, false, -1)
	if err != nil {
		return nil, err
	}
	gNoCachePS, err := e.Guard(e.StorePS, false, -1)
	if err != nil {
		return nil, err
	}
	bar, err := barrier.NewGorm(e.Gorm, &barrier.GormOptions{Table: BarrierTable})
	if err != nil {
		return nil, err
	}
	classic := NewClassic(e.Gorm, e.Redis, e.ClassicTable, e.Prefix+"classic:", newKeyCacheTTL)
	classicPS := NewClassic(e.GormPS, e.Redis, e.ClassicTable, e.Prefix+"classic:", newKeyCacheTTL)
	classicReplay := NewClassic(e.Gorm, e.Redis, e.ClassicTable, e.Prefix+"classic:", replayCacheTTL)
	amount := int64(1)

	// bizTx is the business transaction: one INSERT in a transaction of its own.
	bizTx := func(db *gorm.DB) func(ctx context.Context, key string) error {
		return func(ctx context.Context, key string) error {
			return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				return tx.Exec(e.InsertBiz, key, amount).Error
			})
		}
	}
	biz, bizPS := bizTx(e.Gorm), bizTx(e.GormPS)

	// txMode is the recommended Tx mode: the Guard begins, writes the record once, commits.
	txMode := func(g *idemkit.Guard, st *record.Store, scope string) Op {
		return func(ctx context.Context, w *Worker) error {
			key := w.Key()
			_, err := st.Tx(ctx, g, idemkit.Call{Scope: scope, Key: key}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
				return result, tx.Exec(e.InsertBiz, key, amount).Error
			})
			return err
		}
	}
	// txCallerOwned is Tx mode in the caller's own transaction (DoTx), the v1 way of writing it.
	txCallerOwned := func(db *gorm.DB, g *idemkit.Guard, st *record.Store, scope string) Op {
		return func(ctx context.Context, w *Worker) error {
			key := w.Key()
			return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				_, err := g.DoTx(ctx, st.WithTx(tx), idemkit.Call{Scope: scope, Key: key}, func(context.Context) ([]byte, error) {
					return result, tx.Exec(e.InsertBiz, key, amount).Error
				})
				return err
			})
		}
	}
	// markTx is MarkTx in a transaction the Guard owns (store.TxMark), as DTM's barrier owns its own.
	markTx := func(g *idemkit.Guard, scope string) Op {
		return func(ctx context.Context, w *Worker) error {
			key := w.Key()
			return e.Store.TxMark(ctx, g, idemkit.Call{Scope: scope, Key: key}, func(ctx context.Context, tx *gorm.DB) error {
				return tx.Exec(e.InsertBiz, key, amount).Error
			})
		}
	}
	// markTxCaller is MarkTx in the caller's gorm transaction.
	markTxCaller := func(g *idemkit.Guard, scope string) Op {
		return func(ctx context.Context, w *Worker) error {
			key := w.Key()
			return e.Gorm.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				return g.MarkTx(ctx, e.Store.WithTx(tx), idemkit.Call{Scope: scope, Key: key}, func(context.Context) error {
					return tx.Exec(e.InsertBiz, key, amount).Error
				})
			})
		}
	}
	execute := func(g *idemkit.Guard, bizFn func(context.Context, string) error, scope string) Op {
		return func(ctx context.Context, w *Worker) error {
			key := w.Key()
			_, err := g.Do(ctx, idemkit.Call{Scope: scope, Key: key}, func(ctx context.Context) ([]byte, error) {
				return result, bizFn(ctx, key)
			})
			return err
		}
	}
	classicOp := func(c *Classic, bizFn func(context.Context, string) error) Op {
		return func(ctx context.Context, w *Worker) error {
			key := w.Key()
			_, _, err := c.Do(ctx, "bench", key, func(ctx context.Context) ([]byte, error) { return result, bizFn(ctx, key) })
			return err
		}
	}
	replayOp := func(g *idemkit.Guard, scope string) (Op, func(context.Context) error) {
		keys := fixedKeys(e.Run + "-" + scope)
		setup := func(ctx context.Context) error {
			return parallel(ctx, 16, len(keys), func(ctx context.Context, i int) error {
				_, err := g.Do(ctx, idemkit.Call{Scope: scope, Key: keys[i]}, func(ctx context.Context) ([]byte, error) {
					return result, biz(ctx, keys[i])
				})
				return err
			})
		}
		op := func(ctx context.Context, w *Worker) error {
			res, err := g.Do(ctx, idemkit.Call{Scope: scope, Key: keys[w.pick(len(keys))]}, failIfRun)
			if err == nil && !res.Replayed {
				err = errors.New("not replayed")
			}
			return err
		}
		return op, setup
	}

	vs := []*Variant{
		{Name: VBare, Group: "write", What: "business transaction alone: BEGIN; INSERT; COMMIT (gorm)",
			Op: func(ctx context.Context, w *Worker) error { return biz(ctx, w.Key()) }},
		{Name: VBareSQL, Group: "write", What: "the same transaction through database/sql, without gorm (DTM's path)",
			Op: func(ctx context.Context, w *Worker) error {
				tx, err := e.SQL.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, e.InsertBiz, w.Key(), amount); err != nil {
					_ = tx.Rollback()
					return err
				}
				return tx.Commit()
			}},
		{Name: VTx, Group: "write", What: "idemkit Tx mode: store.Tx (guard-owned transaction) around the INSERT, the record one INSERT in it; Redis Locker",
			Op: txMode(gExec, e.Store, "bench/tx")},
		{Name: VTxNoLock, Group: "write", What: "idemkit Tx mode without a Locker: one read before, the record one INSERT in the transaction",
			Op: txMode(gNoLock, e.Store, "bench/tx-nolock")},
		{Name: VTxPS, Group: "write", What: "Tx mode, gorm PrepareStmt on",
			Op: txMode(gExecPS, e.StorePS, "bench/tx-ps")},
		{Name: VMarkTx, Group: "write", What: "idemkit TxMark: store.TxMark (guard-owned transaction), the mark one INSERT in it before the business (no stored result); Redis Locker",
			Op: markTx(gExec, "bench/mark-tx")},
		{Name: VMarkTxNoLock, Group: "write", What: "TxMark without a Locker: the nearest idemkit has to DTM's barrier (both own their transaction)",
			Op: markTx(gNoLock, "bench/mark-tx-nolock")},
		{Name: VMarkTxCaller, Group: "write", What: "MarkTx in the caller's transaction: guard.MarkTx(store.WithTx(tx)) in db.Transaction, without a Locker",
			Op: markTxCaller(gNoLock, "bench/mark-tx-caller")},
		{Name: VExecute, Group: "write", What: "idemkit Execute mode: guard.Do around the business transaction",
			Op: execute(gExec, biz, "bench/execute")},
		{Name: VExecLean, Group: "write", What: "Execute mode, the Store on server-side prepared statements (a pool without interpolateParams)",
			Op: execute(gPrep, biz, "bench/execute-lean")},
		{Name: VTxLean, Group: "write", What: "Tx mode in the caller's transaction: guard.DoTx(store.WithTx(tx)) in db.Transaction (a read and the record's INSERT in it); Redis Locker",
			Op: txCallerOwned(e.Gorm, gExec, e.Store, "bench/tx-lean")},
		{Name: VExecNoLock, Group: "write", What: "Execute mode without a Locker (database only)",
			Op: execute(gNoLock, biz, "bench/execute-nolock")},
		{Name: VExecutePS, Group: "write", What: "Execute mode, gorm PrepareStmt on",
			Op: execute(gExecPS, bizPS, "bench/execute-ps")},
		{Name: VMark, Group: "write", What: "idemkit Mark mode: guard.Mark around the business transaction",
			Op: func(ctx context.Context, w *Worker) error {
				key := w.Key()
				return gExec.Mark(ctx, idemkit.Call{Scope: "bench/mark", Key: key}, func(ctx context.Context) error { return biz(ctx, key) })
			}},
		{Name: VDTM, Group: "write", What: "DTM's dtmcli barrier (BranchBarrier.CallWithDB, saga action) around the INSERT",
			Op: func(ctx context.Context, w *Worker) error {
				key := w.Key()
				bb, err := dtmcli.BarrierFrom("saga", key, "01", "action")
				if err != nil {
					return err
				}
				bb.DBType, bb.BarrierTableName = dtmcli.DBTypeMysql, BarrierTable
				return bb.CallWithDB(e.SQL, func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, e.InsertBiz, key, amount)
					return err
				})
			}},
		{Name: VBarrier, Group: "write", What: "idemkit's barrier package (barrier.Gorm.Call in db.Transaction, saga action) around the INSERT",
			Op: func(ctx context.Context, w *Worker) error {
				key := w.Key()
				b, err := barrier.NewBranch("saga", key, "01", "action")
				if err != nil {
					return err
				}
				return e.Gorm.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					return bar.Call(ctx, tx, b, func(tx *gorm.DB) error { return tx.Exec(e.InsertBiz, key, amount).Error })
				})
			}},
		{Name: VClassic, Group: "write", What: "classic flow: GET cache, Lua lock, INSERT PROCESSING, business tx, UPDATE, SET cache, Lua unlock",
			Op: classicOp(classic, biz)},
		{Name: VClassicPS, Group: "write", What: "classic flow, gorm PrepareStmt on", Op: classicOp(classicPS, bizPS)},
		{Name: VBarePS, Group: "write", What: "business transaction alone, gorm PrepareStmt on",
			Op: func(ctx context.Context, w *Worker) error { return bizPS(ctx, w.Key()) }},
	}

	rop, rsetup := replayOp(gReplay, "bench/replay")
	vs = append(vs, &Variant{Name: VReplay, Group: "replay", What: "idemkit replay of a finished key, from the Redis cache (guard.Do)", Op: rop, Setup: rsetup})
	uop, usetup := replayOp(gNoCache, "bench/replay-uncached")
	vs = append(vs, &Variant{Name: VReplayDB, Group: "replay", What: "idemkit replay with the cache off (CacheTTL < 0): lock, insert conflict, read, unlock", Op: uop, Setup: usetup})
	upsop, upssetup := replayOp(gNoCachePS, "bench/replay-uncached-ps")
	vs = append(vs, &Variant{Name: VReplayDBPS, Group: "replay", What: "uncached replay, gorm PrepareStmt on", Op: upsop, Setup: upssetup})

	ckeys := fixedKeys(e.Run + "-classic")
	vs = append(vs, &Variant{Name: VClassicReplay, Group: "replay", What: "classic flow replay of a finished key (GET cache hit)",
		Setup: func(ctx context.Context) error {
			return parallel(ctx, 16, len(ckeys), func(ctx context.Context, i int) error {
				_, _, err := classicReplay.Do(ctx, "bench", ckeys[i], func(ctx context.Context) ([]byte, error) { return result, biz(ctx, ckeys[i]) })
				return err
			})
		},
		Op: func(ctx context.Context, w *Worker) error {
			_, replayed, err := classicReplay.Do(ctx, "bench", ckeys[w.pick(len(ckeys))], failIfRun)
			if err == nil && !replayed {
				err = errors.New("not replayed")
			}
			return err
		}})

	hv, err := httpVariants(e, gExec, gReplay, biz)
	if err != nil {
		return nil, err
	}
	vs = append(vs, hv...)
	vs = append(vs, grpcVariants(e, gExec, gExec, e.Store, biz)...) // grpc.go
	vs = append(vs, rawSQLVariants(e)...)                           // rawsql.go
	mv, err := msgVariants(e, gExec)                                // message consumers (msg.go); optional, they need the brokers
	if err != nil {
		return nil, err
	}
	vs = append(vs, mv...)

	m := make(map[string]*Variant, len(vs))
	for _, v := range vs {
		m[v.Name] = v
	}
	return m, nil
}

func failIfRun(context.Context) ([]byte, error) {
	return nil, errors.New("bench: a replay ran the function")
}

func fixedKeys(prefix string) []string {
	keys := make([]string, replayKeys)
	for i := range keys {
		keys[i] = prefix + "-" + strconv.Itoa(i)
	}
	return keys
}

// parallel runs f(i) for i in [0, n) on conc goroutines and returns the first error.
func parallel(ctx context.Context, conc, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	done := make(chan struct{})
	for range conc {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range next {
				if err := f(ctx, i); err != nil {
					cancel(fmt.Errorf("item %d: %w", i, err))
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	for range conc {
		<-done
	}
	return context.Cause(ctx)
}
