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

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/cluster"
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
	var n atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for w := range o.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := f(ctx, w); err != nil {
					if ctx.Err() != nil {
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

// measureWrites measures one write mode through one Guard per database in dbs (pids are the
// servers' processes) once.
func measureWrites(ctx context.Context, meta *gorm.DB, dbs []*gorm.DB, pids []int, mode string, o *Options) (Write, error) {
	w, f, err := prepareWrite(ctx, meta, dbs, mode, o)
	if err != nil {
		return w, err
	}
	return measureRound(ctx, w, pids, f, o)
}

// measureRound runs f once for o.Duration and fills w's figures.
func measureRound(ctx context.Context, w Write, pids []int, f func(ctx context.Context, worker int) error, o *Options) (Write, error) {
	calls, took, dbCPU, self, err := run(ctx, pids, o, f)
	if err != nil {
		return w, err
	}
	if calls == 0 {
		return w, errors.New("no call completed")
	}
	w.Calls = calls
	w.PerSecond = float64(calls) / took.Seconds()
	w.DBMicros = float64(dbCPU.Microseconds()) / float64(calls)
	if w.DBMicros > 0 {
		w.PerDBCore = 1e6 / w.DBMicros
	}
	w.GoMicros = float64(self.Microseconds()) / float64(calls)
	return w, nil
}

// median returns the round with the median database CPU per call (rounds must not be empty).
func median(rounds []Write) Write {
	s := slices.Clone(rounds)
	slices.SortFunc(s, func(a, b Write) int { return cmp.Compare(a.DBMicros, b.DBMicros) })
	return s[len(s)/2]
}

// prepareWrite creates mode's tables and returns the Write to fill and the call to measure.
func prepareWrite(ctx context.Context, meta *gorm.DB, dbs []*gorm.DB, mode string, o *Options) (Write, func(ctx context.Context, worker int) error, error) {
	table := "rec_" + strings.ReplaceAll(mode, "-", "_") + "_" + newKey()[:6]
	result := make([]byte, o.ResultSize)
	w := Write{Mode: mode}
	var f func(ctx context.Context, worker int) error
	if mode == "bare" {
		w.Writes = "one INSERT of a narrow row in its own transaction (reference, no idemkit)"
		if err := meta.Exec("CREATE TABLE " + table + " (k VARCHAR(64) PRIMARY KEY, v VARCHAR(64) NOT NULL)").Error; err != nil {
			return w, nil, err
		}
		f = func(ctx context.Context, worker int) error {
			return dbs[worker%len(dbs)].WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				return tx.Exec("INSERT INTO "+table+" (k, v) VALUES (?, ?)", newKey(), "x").Error
			})
		}
	} else {
		stores := make([]*record.Store, len(dbs))
		guards := make([]*idemkit.Guard, len(dbs))
		for i, db := range dbs {
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
			if guards[i], err = idemkit.New(s, nil); err != nil {
				return w, nil, err
			}
		}
		fn := func(context.Context) ([]byte, error) { return result, nil }
		switch mode {
		case "execute":
			w.Writes = "claim INSERT + finish UPDATE, each its own transaction (no Locker)"
			f = func(ctx context.Context, worker int) error {
				_, err := guards[worker%len(guards)].Do(ctx, idemkit.Call{Scope: "capacity", Key: newKey()}, fn)
				return err
			}
		case "tx":
			w.Writes = "claim INSERT + finish UPDATE in one transaction (no business write, no Locker)"
			f = func(ctx context.Context, worker int) error {
				i := worker % len(guards)
				return dbs[i].WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					_, err := guards[i].DoTx(ctx, stores[i].WithTx(tx), idemkit.Call{Scope: "capacity", Key: newKey()}, fn)
					return err
				})
			}
		case "mark-tx":
			w.Writes = "one INSERT in one transaction, no stored result (no Locker)"
			f = func(ctx context.Context, worker int) error {
				i := worker % len(guards)
				return dbs[i].WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					return guards[i].MarkTx(ctx, stores[i].WithTx(tx), idemkit.Call{Scope: "capacity", Key: newKey()},
						func(context.Context) error { return nil })
				})
			}
		default:
			return w, nil, fmt.Errorf("unknown mode %q", mode)
		}
	}
	return w, f, nil
}

// measureGalera measures Execute mode with one Guard per Galera node.
func measureGalera(ctx context.Context, g *cluster.Galera, o *Options) (Write, error) {
	admin, err := open(g.Node(0), "", 2)
	if err != nil {
		return Write{}, err
	}
	defer closeDB(admin)
	if err := admin.Exec("CREATE DATABASE capacity").Error; err != nil {
		return Write{}, err
	}
	var dbs []*gorm.DB
	var pids []int
	for _, n := range g.Nodes() {
		db, err := open(n, "capacity", o.Concurrency/3+2)
		if err != nil {
			return Write{}, err
		}
		defer closeDB(db)
		dbs = append(dbs, db)
		pid, err := n.PID()
		if err != nil {
			return Write{}, err
		}
		pids = append(pids, pid)
	}
	w, err := measureWrites(ctx, dbs[0], dbs, pids, "execute", o)
	w.Mode = "execute, Galera (3 nodes)"
	w.Writes = "as execute, one Guard per node; DB CPU summed over the 3 nodes"
	return w, err
}
