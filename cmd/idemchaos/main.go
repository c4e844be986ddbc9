//go:build unix

// Command idemchaos runs idemkit's chaos harness: worker processes with their own Guards, gorm pools
// and Redis clients serve Execute-mode, Tx-mode, TxMark, Mark-mode and HTTP (httpx) requests for a
// load generator that hammers shared keys with duplicates, while Redis is killed and restarted empty,
// the database (MariaDB, or PostgreSQL with -db postgres) is restarted, workers are SIGKILLed inside
// business functions and frozen past their lease. An independent checker then reads the business
// tables and the record table and verifies that every key took effect at most once (exactly once
// when answered with success; Mark mode promises at most once only), that the money is conserved,
// that every answer matches the stored result, that nothing is stuck PROCESSING and that no fenced
// write was lost or duplicated.
//
// It starts a private database server (mariadbd, or PostgreSQL run as the user postgres when root)
// and redis-server on free loopback ports (never the shared ones) and stops every process it started,
// also on failure and on Ctrl-C.
//
//	go run ./cmd/idemchaos                      # 30s of load, every fault
//	go run ./cmd/idemchaos -db postgres         # the same on a private PostgreSQL
//	go run ./cmd/idemchaos -duration 10m        # a soak (see scripts/soak.sh)
//	go run ./cmd/idemchaos -sabotage drop-unique-index   # prove the checker catches duplicates
//	go run ./cmd/idemchaos grpc                 # the gRPC interceptor under server kills (suites.go)
//	go run ./cmd/idemchaos dtm-msg              # DTM 2-phase messages under publisher kills (suites.go)
//	go run ./cmd/idemchaos msg -messages 5000 -kills 20  # message consumers on NATS and RabbitMQ (see msg.go)
//	go run ./cmd/idemchaos -dtm both -duration 5m # the DTM scenario (below), both modes in turn
//
// With -dtm it runs the DTM scenario instead: the example's order service
// (examples/order-pay-inventory, serve mode) under duplicate storms of saga and TCC orders, SIGKILLed
// every -kill-every and restarted on its data — with an external DTM server on a private MariaDB and
// Redis ("external"), and on its embedded defaults with the DTM child process restarted on the data
// directory ("embedded") — then every key retried until answered; the checker verifies one order per
// key in every answer, money and stock conserved, every failed order compensated, nothing PENDING.
//
// It prints a summary and exits 0 when the checker found no violation, 1 when it found some (each is
// printed), 2 when the harness could not run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit/internal/chaos"
	"github.com/idemkit/idemkit/internal/msgchaos"
)

func main() {
	chaos.RunWorkerIfRequested() // a worker process started by the harness never returns from here
	runChildIfRequested()        // likewise for the gRPC and DTM msg runs (suites.go)
	msgchaos.RunWorkerIfRequested()
	if len(os.Args) > 1 && os.Args[1] == "msg" {
		os.Exit(runMsg(os.Args[2:]))
	}
	if code, ok := runSuite(os.Args[1:]); ok {
		os.Exit(code)
	}
	// The harness's own connections see MariaDB restart on purpose; the driver need not say so.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	os.Exit(run())
}

func run() int {
	var (
		c        chaos.Config
		faults   string
		sabotage string
		jsonOut  string
		quiet    bool
		dtmModes string
		dc       chaos.DTMConfig
	)
	flag.DurationVar(&c.Duration, "duration", chaos.DefaultDuration, "length of the load phase (faults run in its first 80%)")
	flag.IntVar(&c.Workers, "workers", chaos.DefaultWorkers, "worker processes")
	flag.IntVar(&c.Clients, "clients", chaos.DefaultClients, "concurrent load-generator clients")
	flag.IntVar(&c.MaxRequests, "max-requests", chaos.DefaultMaxRequests, "bound on the requests of the load phase")
	flag.DurationVar(&c.Lease, "lease", chaos.DefaultLease, "idemkit Options.Lease of the workers")
	flag.DurationVar(&c.LockTTL, "lock-ttl", chaos.DefaultLockTTL, "idemkit Options.LockTTL of the workers")
	flag.BoolVar(&c.Watchdog, "watchdog", false, "idemkit Options.Watchdog of the workers")
	flag.DurationVar(&c.SweepInterval, "sweep-interval", chaos.DefaultSweepInterval, "the workers' sweeper interval")
	flag.StringVar(&c.Database, "db", chaos.MariaDB, "database of the records and the business, a private server: mariadb or postgres")
	flag.StringVar(&faults, "faults", "all", "faults to inject, in turn: all, none, or a comma-separated list of redis_restart, mariadb_restart (postgres_restart with -db postgres), worker_kill, worker_stall")
	flag.DurationVar(&c.FaultInterval, "fault-interval", chaos.DefaultFaultInterval, "time between the starts of two faults")
	flag.IntVar(&c.MaxFaults, "max-faults", 0, "bound on the number of faults (0: bounded by the duration)")
	flag.Float64Var(&c.FlakyRate, "flaky", chaos.DefaultFlakyRate, "probability that a business function fails with a retryable error (negative: never)")
	flag.StringVar(&sabotage, "sabotage", "", "break idemkit on purpose: drop-unique-index or ignore-fence (violations expected)")
	flag.Int64Var(&c.Seed, "seed", 0, "seed of the load and fault schedule (0: from the clock)")
	flag.StringVar(&c.Dir, "dir", "", "run directory for data and logs (default: a temporary directory)")
	flag.BoolVar(&c.KeepDir, "keep", false, "keep the run directory")
	flag.StringVar(&jsonOut, "json", "", "also write the full report as JSON to this file")
	flag.BoolVar(&quiet, "q", false, "no progress lines")
	flag.StringVar(&dtmModes, "dtm", "", "run the DTM scenario instead, in these modes: external, embedded or both")
	flag.DurationVar(&dc.KillEvery, "kill-every", chaos.DefaultKillEvery, "DTM scenario: mean time between two SIGKILLs of the order service")
	flag.IntVar(&dc.Dup, "dup", chaos.DefaultDTMDup, "DTM scenario: identical requests per new key, sent at once")
	flag.Parse()
	if dtmModes != "" {
		dc.Duration, dc.Clients, dc.Seed, dc.Dir, dc.KeepDir = c.Duration, c.Clients, c.Seed, c.Dir, c.KeepDir
		return runDTM(dtmModes, dc, jsonOut, quiet)
	}

	if faults != "all" { // all: every fault of the database's run (Config's default)
		fs, err := chaos.ParseFaults(faults)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		c.Faults = fs
	}
	c.Sabotage = chaos.Sabotage(sabotage)
	logger := log.New(os.Stderr, "idemchaos ", log.Ltime|log.Lmicroseconds)
	if !quiet {
		c.Logf = logger.Printf
	}

	// Ctrl-C or SIGTERM cancel the run; Run stops every process it started before returning.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep, err := chaos.Run(ctx, &c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "idemchaos: %v (after %s)\n", err, time.Since(start).Round(time.Second))
		return 2
	}
	fmt.Print(rep.Summary(0))
	if jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(jsonOut, b, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "idemchaos: writing %s: %v\n", jsonOut, err)
		}
	}
	if len(rep.Violations()) > 0 {
		return 1
	}
	return 0
}

// runDTM runs the DTM scenario in each mode of modes, in turn, and returns the exit code.
func runDTM(modes string, c chaos.DTMConfig, jsonOut string, quiet bool) int {
	ms, err := chaos.ParseDTMModes(modes)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	logger := log.New(os.Stderr, "idemchaos ", log.Ltime|log.Lmicroseconds)
	if !quiet {
		c.Logf = logger.Printf
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := 0
	var reps []*chaos.DTMReport
	for _, m := range ms {
		c.Mode = m
		start := time.Now()
		rep, err := chaos.RunDTM(ctx, &c)
		if err != nil {
			fmt.Fprintf(os.Stderr, "idemchaos: dtm %s: %v (after %s)\n", m, err, time.Since(start).Round(time.Second))
			return 2
		}
		fmt.Print(rep.Summary(0))
		reps = append(reps, rep)
		if len(rep.Violations()) > 0 {
			code = 1
		}
	}
	if jsonOut != "" {
		b, _ := json.MarshalIndent(reps, "", "  ")
		if err := os.WriteFile(jsonOut, b, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "idemchaos: writing %s: %v\n", jsonOut, err)
		}
	}
	return code
}
