//go:build linux

package capacity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/cluster"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
)

// run calls f from o.Concurrency goroutines for o.Duration and returns the calls made, the elapsed
// time and the CPU used by pids and by this process.
func run(ctx context.Context, pids []int, o *Options, f func(ctx context.Context, worker int) error) (calls int64, took, db, self time.Duration, err error) {
	runtime.GC()
	db0, err := cpuOf(pids)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	self0 := selfCPU()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	deadline, _ := ctx.Deadline()
	var n atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for w := range o.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := f(ctx, w); err != nil {
					// A call cut by the run's end is not a failure. The deadline may have passed before
					// ctx says so (its timer fires a little later): a client that checks the deadline
					// itself (go-redis, a pipeline's context) already fails with it.
					if ctx.Err() != nil || !time.Now().Before(deadline) {
						return
					}
					once.Do(func() { first = err })
					cancel()
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	took = time.Since(start)
	db1, err := cpuOf(pids)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	return n.Load(), took, db1 - db0, selfCPU() - self0, first
}

// target is where a write mode runs: one Guard per database in dbs (meta creates the tables), the
// database servers' processes (pids, for their CPU) and, when rdb is set, a Redis for the Locker of
// the modes that use one (its CPU is read from INFO).
type target struct {
	meta *gorm.DB
	dbs  []*gorm.DB
	pids []int
	rdb  *redis.Client
}

// measureWrites measures one write mode on t once.
func measureWrites(ctx context.Context, t *target, mode string, o *Options) (Write, error) {
	w, f, err := prepareWrite(ctx, t, mode, o)
	if err != nil {
		return w, err
	}
	return measureRound(ctx, w, t, f, o)
}

// measureRound runs f once for o.Duration and fills w's figures.
func measureRound(ctx context.Context, w Write, t *target, f func(ctx context.Context, worker int) error, o *Options) (Write, error) {
	var r0 float64
	if t.rdb != nil && w.Locker {
		var err error
		if r0, err = redisCPU(ctx, t.rdb); err != nil {
			return w, err
		}
	}
	calls, took, dbCPU, self, err := run(ctx, t.pids, o, f)
	if err != nil {
		return w, err
	}
	if calls == 0 {
		return w, errors.New("no call completed")
	}
	w.Calls = calls
	w.PerSecond = float64(calls) / took.Seconds()
	w.DBMicros = float64(dbCPU.Microseconds()) / float64(calls)
	w.PerDBCore = 0
	if w.DBMicros > 0 && w.Statements != "" {
		w.PerDBCore = 1e6 / w.DBMicros
	}
	w.GoMicros = float64(self.Microseconds()) / float64(calls)
	if t.rdb != nil && w.Locker {
		r1, err := redisCPU(ctx, t.rdb)
		if err != nil {
			return w, err
		}
		w.RedisMicros = (r1 - r0) * 1e6 / float64(calls)
	}
	return w, nil
}

// median returns the round with the median database CPU per call (rounds must not be empty); a
// mode that reaches no database by its median Redis CPU, then Go CPU.
func median(rounds []Write) Write {
	s := slices.Clone(rounds)
	slices.SortFunc(s, func(a, b Write) int {
		if a.Statements == "" {
			return cmp.Or(cmp.Compare(a.RedisMicros, b.RedisMicros), cmp.Compare(a.GoMicros, b.GoMicros))
		}
		return cmp.Compare(a.DBMicros, b.DBMicros)
	})
	return s[len(s)/2]
}

// Write modes measured by [Measure], in order.
var writeModes = []string{"bare", "mark-tx", "tx", "tx-nolock", "execute", "replay", "replay-uncached"}

// replayKeys is how many finished keys a replay mode cycles through.
const replayKeys = 1024

// prepareWrite creates mode's table (and, for a replay mode, finishes the keys it replays) and
// returns the Write to fill and the call to measure. The modes with a Locker need t.rdb.
func prepareWrite(ctx context.Context, t *target, mode string, o *Options) (Write, func(ctx context.Context, worker int) error, error) {
	table := "rec_" + strings.ReplaceAll(mode, "-", "_") + "_" + newKey()[:6]
	result := make([]byte, o.ResultSize)
	w := Write{Mode: mode}
	if mode == "bare" {
		w.Writes = "one INSERT of a narrow row in its own transaction (reference, no idemkit)"
		w.Statements = "1 INSERT"
		if err := t.meta.Exec("CREATE TABLE " + table + " (k VARCHAR(64) PRIMARY KEY, v VARCHAR(64) NOT NULL)").Error; err != nil {
			return w, nil, err
		}
		f := func(ctx context.Context, worker int) error {
			return t.dbs[worker%len(t.dbs)].WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				return tx.Exec("INSERT INTO "+table+" (k, v) VALUES (?, ?)", newKey(), "x").Error
			})
		}
		return w, f, nil
	}
	switch mode {
	case "tx", "replay":
		if t.rdb == nil {
			return w, nil, fmt.Errorf("mode %s needs a Redis", mode)
		}
		w.Locker = true
	case "execute": // with a Locker when there is a Redis
		w.Locker = t.rdb != nil
	case "mark-tx", "tx-nolock", "replay-uncached":
	default:
		return w, nil, fmt.Errorf("unknown mode %q", mode)
	}
	stores := make([]*record.Store, len(t.dbs))
	guards := make([]*idemkit.Guard, len(t.dbs))
	for i, db := range t.dbs {
		s, err := record.New(db, &record.Options{Table: table})
		if err != nil {
			return w, nil, err
		}
		if i == 0 {
			if err := s.CreateTable(ctx); err != nil {
				return w, nil, err
			}
		}
		stores[i] = s
		var opts idemkit.Options // defaults: TTL 24h, CacheTTL = TTL
		if w.Locker {
			opts.Locker = lock.New(t.rdb, &lock.Options{Prefix: "capacity:" + mode + ":"})
		}
		if guards[i], err = idemkit.New(s, &opts); err != nil {
			return w, nil, err
		}
	}
	call := func(key string) idemkit.Call { return idemkit.Call{Scope: "POST /api/orders", Key: key} }
	fn := func(context.Context) ([]byte, error) { return result, nil }
	var f func(ctx context.Context, worker int) error
	switch mode {
	case "mark-tx":
		w.Writes = "MarkTx in the caller's transaction: the key marked done, no result (no Locker, no business write)"
		w.Statements = "1 INSERT in the caller's transaction"
		f = func(ctx context.Context, worker int) error {
			i := worker % len(guards)
			return t.dbs[i].WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				return guards[i].MarkTx(ctx, stores[i].WithTx(tx), call(newKey()), func(context.Context) error { return nil })
			})
		}
	case "tx", "tx-nolock":
		w.Writes = "Guard.Tx (record.Store.Tx): the final record with its result written once, in the transaction the Guard begins and commits (no business write)"
		w.Statements = "1 INSERT in the Guard's transaction"
		if mode == "tx" {
			w.Writes += "; Redis Locker, CacheTTL = TTL, so the cache vouches for new keys"
			w.Redis = "SET NX GET before, SET GET (cache fill) after"
		} else {
			w.Writes += "; no Locker, so the record is read first"
			w.Statements = "1 SELECT by primary key, then 1 INSERT in the Guard's transaction"
		}
		f = func(ctx context.Context, worker int) error {
			i := worker % len(guards)
			_, err := stores[i].Tx(ctx, guards[i], call(newKey()), func(context.Context, *gorm.DB) ([]byte, error) { return result, nil })
			return err
		}
	case "execute":
		w.Writes = "Guard.Do (Execute mode): claim, then finish, each its own transaction (no business write); "
		w.Statements = "1 INSERT (claim) + 1 UPDATE by primary key (finish), two commits"
		if w.Locker {
			w.Writes += "Redis Locker"
			w.Redis = "SET NX GET before, SET GET (cache fill) after"
		} else {
			w.Writes += "no Locker"
		}
		f = func(ctx context.Context, worker int) error {
			_, err := guards[worker%len(guards)].Do(ctx, call(newKey()), fn)
			return err
		}
	case "replay", "replay-uncached":
		keys := make([]string, replayKeys)
		for i := range keys {
			keys[i] = newKey()
			if _, err := guards[i%len(guards)].Do(ctx, call(keys[i]), fn); err != nil {
				return w, nil, err
			}
		}
		if mode == "replay" {
			w.Writes = "a duplicate of a finished key answered from the Redis cache (Guard.Do, Redis Locker)"
			w.Redis = "1 SET NX GET"
		} else {
			w.Writes = "a duplicate of a finished key answered from the record (Guard.Do, no Locker: a result no longer cached)"
			w.Statements = "1 INSERT that finds the record + 1 SELECT by primary key"
		}
		var seq atomic.Int64
		f = func(ctx context.Context, worker int) error {
			k := keys[int(seq.Add(1))%len(keys)]
			res, err := guards[worker%len(guards)].Do(ctx, call(k), fn)
			if err == nil && !res.Replayed {
				err = fmt.Errorf("key %s ran again instead of being replayed", k)
			}
			return err
		}
	}
	return w, f, nil
}

// measureGalera measures Tx mode (Guard.Tx reading the record first, then one INSERT in its
// transaction) and Execute mode, without a Locker, with one Guard per Galera node, one round each.
func measureGalera(ctx context.Context, g *cluster.Galera, o *Options) ([]Write, error) {
	admin, err := open(g.Node(0), "", 2)
	if err != nil {
		return nil, err
	}
	defer closeDB(admin)
	if err := admin.Exec("CREATE DATABASE capacity").Error; err != nil {
		return nil, err
	}
	t := &target{}
	for _, n := range g.Nodes() {
		db, err := open(n, "capacity", o.Concurrency/3+2)
		if err != nil {
			return nil, err
		}
		defer closeDB(db)
		t.dbs = append(t.dbs, db)
		pid, err := n.PID()
		if err != nil {
			return nil, err
		}
		t.pids = append(t.pids, pid)
	}
	t.meta = t.dbs[0]
	var out []Write
	for _, mode := range []string{"tx-nolock", "execute"} {
		w, err := measureWrites(ctx, t, mode, o)
		if err != nil {
			return nil, fmt.Errorf("capacity: Galera, %s: %w", mode, err)
		}
		w.Mode += ", Galera (3 nodes)"
		w.Writes = "as " + mode + " without a Locker, one Guard per node; DB CPU summed over the 3 nodes"
		out = append(out, w)
	}
	return out, nil
}
