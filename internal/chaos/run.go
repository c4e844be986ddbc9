//go:build unix

package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Bounds of a run's phases after the load.
const (
	setupTimeout = 3 * time.Minute
	checkTimeout = 2 * time.Minute
)

// Run runs the chaos harness once and returns its report. It starts a private database server
// (mariadbd, or PostgreSQL: [Config.Database]) and redis-server on free loopback ports (the shared
// servers are never touched), cfg.Workers worker processes (this executable re-run in worker mode:
// see [RunWorkerIfRequested]) and a load generator; injects the faults while the load runs; lets the sweeper work; settles every key; stops
// every process; and runs the checker ([Check]).
//
// It returns an error when the harness could not run (a service would not start, ctx was
// cancelled); violations are in the report, not in the error. Every process it starts is stopped
// before it returns, on every path. Run is safe to call from several goroutines, though each run
// costs a database server.
func Run(ctx context.Context, cfg *Config) (rep *Report, err error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	exe := c.WorkerCommand
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("chaos: finding this executable to run workers: %w", err)
		}
	}
	dir := c.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "idemchaos-"); err != nil {
			return nil, err
		}
		defer func() {
			// Keep the data and logs when asked, or when a real run found violations to debug.
			if c.KeepDir || rep != nil && len(rep.Violations()) > 0 && c.Sabotage == SabotageNone {
				c.Logf("run directory kept: %s", dir)
				return
			}
			_ = os.RemoveAll(dir)
		}()
	}
	procs := newProcSet()
	defer procs.killAll()
	logf := c.Logf
	started := time.Now()

	sctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	d, _ := dialectOf(c.Database) // checked by withDefaults
	server, err := d.start(sctx, procs, filepath.Join(dir, d.name), logf)
	if err != nil {
		return nil, fmt.Errorf("chaos: private %s: %w", d.name, err)
	}
	rds, err := startRedis(sctx, procs, filepath.Join(dir, "redis"))
	if err != nil {
		return nil, fmt.Errorf("chaos: private Redis: %w", err)
	}
	logf("%s on %s, redis on %s", d.name, server.Addr(), rds.addr)
	tables := DefaultTables()
	dsn := server.DSN(Database)
	if err := setupSchema(sctx, d, server.DSN(""), dsn, tables, c); err != nil {
		return nil, fmt.Errorf("chaos: schema: %w", err)
	}

	events := &eventLog{}
	wdir := filepath.Join(dir, "workers")
	if err := os.MkdirAll(wdir, 0o755); err != nil {
		return nil, err
	}
	pool := newWorkerPool(exe, workerConfig{
		Database: d.name, DSN: dsn, Tables: tables, RedisAddr: rds.addr, LockPrefix: "chaos:",
		Lease: c.Lease, LockTTL: c.LockTTL, SweepInterval: c.SweepInterval, Watchdog: c.Watchdog,
		FlakyRate: c.FlakyRate, IgnoreFence: c.Sabotage == SabotageIgnoreFence,
		StallMaxAmount: c.InitialBalance,
	}, c.Workers, wdir, procs, events, logf)
	defer pool.stopAll()
	if err := pool.startAll(sctx); err != nil {
		return nil, fmt.Errorf("chaos: workers: %w", err)
	}
	cancel()
	logf("%d workers up after %s; load for %s", c.Workers, time.Since(started).Round(time.Millisecond), c.Duration)

	// Load and faults.
	rng := newLockedRand(c.Seed)
	lg := newLoadGen(c, pool, rng)
	fr := &faultRunner{cfg: c, pool: pool, lg: lg, events: events, redis: rds, db: server, rng: rng, logf: logf}
	load, stopLoad := context.WithTimeout(ctx, c.Duration)
	defer stopLoad()
	fr.start = time.Now()
	var wg sync.WaitGroup
	var maxOverdue time.Duration
	wg.Add(3)
	go func() { defer wg.Done(); lg.run(load, ctx) }()
	go func() { defer wg.Done(); fr.run(load) }()
	go func() { defer wg.Done(); maxOverdue = watchOverdue(load, d.driver, dsn, tables.Records) }()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var harnessErrs []string
	if err := pool.ensureAll(ctx); err != nil {
		harnessErrs = append(harnessErrs, "restarting workers after the load: "+err.Error())
	}
	answers, _ := lg.snapshot()
	logf("load done: %d requests; waiting for the sweeper", len(answers))

	// The sweeper: with no traffic, every PROCESSING record must be recovered within a lease and a
	// few sweeper intervals.
	var stuck []Violation
	if limit := overdueLimit(c, fr.records); maxOverdue > limit {
		stuck = append(stuck, Violation{Kind: ViolationStuckProcessing, Detail: fmt.Sprintf(
			"during the load a record stayed PROCESSING %s past its lease (limit %s: the longest service restart, then a few sweeper intervals)",
			maxOverdue.Round(time.Millisecond), limit)})
	}
	sweepStart := time.Now()
	sweepLimit := c.Lease + 5*c.SweepInterval + 5*time.Second
	var swept time.Duration
	for {
		n, err := countProcessing(ctx, d.driver, dsn, tables.Records)
		if err == nil && n == 0 {
			swept = time.Since(sweepStart)
			break
		}
		if time.Since(sweepStart) > sweepLimit {
			stuck = append(stuck, Violation{Kind: ViolationStuckProcessing, Detail: fmt.Sprintf(
				"%d records still PROCESSING %s after the load (sweeper interval %s, lease %s; last error %v)",
				n, sweepLimit, c.SweepInterval, c.Lease, err)})
			swept = time.Since(sweepStart)
			break
		}
		sleepCtx(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}

	// Settle every key, then stop the workers.
	unsettled := lg.settle(ctx, max(time.Minute, c.Duration/4))
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	pool.stopAll()
	answers, nkeys := lg.snapshot()
	logf("settled (%d keys left unsettled); checking", unsettled)

	cctx, ccancel := context.WithTimeout(ctx, checkTimeout)
	defer ccancel()
	res, err := Check(cctx, CheckInput{
		Driver: d.driver, DSN: dsn, Tables: tables, Accounts: c.Accounts, InitialBalance: c.InitialBalance,
		Answers: answers, Events: events.snapshot(), Faults: fr.records,
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: checker: %w", err)
	}
	res.Violations = append(res.Violations, stuck...)
	rep = &Report{
		Database: d.name, Seed: c.Seed, Duration: c.Duration, Workers: c.Workers, Clients: c.Clients, Lease: c.Lease, LockTTL: c.LockTTL,
		SweepInterval: c.SweepInterval, Sabotage: c.Sabotage,
		Requests: len(answers), Keys: nkeys, Duplicates: len(answers) - nkeys,
		ByPath: map[string]int{}, ByPhase: map[string]int{}, Answers: map[string]int{},
		Faults: fr.records, FaultsByKind: map[FaultKind]int{},
		WorkersStarted: pool.startedCount(), WorkerTotals: pool.totals(), SweptIn: swept, MaxOverdue: maxOverdue, Unsettled: unsettled,
		Check: res,
	}
	for _, a := range answers {
		rep.ByPath[a.Path]++
		rep.ByPhase[a.Phase]++
		rep.Answers[a.Class]++
	}
	for _, f := range fr.records {
		if f.Injected {
			rep.FaultsByKind[f.Kind]++
		}
	}
	rep.HarnessErrors = append(harnessErrs, pool.crashList()...)
	rep.Elapsed = time.Since(started)
	if c.KeepDir || len(rep.Violations()) > 0 && c.Sabotage == SabotageNone {
		if err := writeLogs(dir, rep, answers, events.snapshot()); err != nil {
			logf("writing the logs: %v", err)
		}
	}
	return rep, nil
}

// overdueLimit is the longest a lapsed claim may stay PROCESSING during the load: a sweeper pass
// may wait for a restarting service to come back (as long as the longest restart took) and for the
// sweeper lock of a killed or frozen holder to expire.
func overdueLimit(c Config, faults []FaultRecord) time.Duration {
	var down time.Duration
	for _, f := range faults {
		if f.Kind == FaultRedisRestart || f.Kind == FaultMariaDBRestart || f.Kind == FaultPostgresRestart {
			down = max(down, f.Took)
		}
	}
	return down + 5*c.SweepInterval + 3*time.Second
}

// watchOverdue samples the record table until ctx ends and returns the longest time a PROCESSING
// record was seen past its lease: how long a lapsed claim waits for a sweeper or a takeover.
// Samples that fail (the database is down) are skipped.
func watchOverdue(ctx context.Context, driver, dsn, table string) time.Duration {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return 0
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var worst time.Duration
	for ctx.Err() == nil {
		var oldest sql.NullInt64
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		err := db.QueryRowContext(qctx, "SELECT MIN(lease_until) FROM "+table+" WHERE status = 'PROCESSING'").Scan(&oldest)
		cancel()
		if err == nil && oldest.Valid {
			worst = max(worst, time.Since(time.UnixMilli(oldest.Int64)))
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	return worst
}

// writeLogs writes the report, every answer and every worker event as JSON into dir, for
// debugging a run.
func writeLogs(dir string, rep *Report, answers []Answer, events []Event) error {
	write := func(name string, items func(enc *json.Encoder) error) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		enc := json.NewEncoder(f)
		return errors.Join(items(enc), f.Close())
	}
	return errors.Join(
		write("report.json", func(enc *json.Encoder) error { return enc.Encode(rep) }),
		write("answers.jsonl", func(enc *json.Encoder) error {
			for _, a := range answers {
				if err := enc.Encode(a); err != nil {
					return err
				}
			}
			return nil
		}),
		write("events.jsonl", func(enc *json.Encoder) error {
			for _, e := range events {
				if err := enc.Encode(e); err != nil {
					return err
				}
			}
			return nil
		}),
	)
}
