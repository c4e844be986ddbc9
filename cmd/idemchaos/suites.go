//go:build unix

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/internal/chaosrpc"
)

// runChildIfRequested serves as a server or publisher process of the gRPC and DTM msg runs when this
// process was started as one (they never return then).
func runChildIfRequested() {
	chaosrpc.RunServerIfRequested()
	chaosdtmmsg.RunChildIfRequested()
}

// runSuite runs "idemchaos grpc [flags]" or "idemchaos dtm-msg [flags]" and reports whether args
// named one of them. Both use the test MariaDB (IDEMKIT_TEST_MYSQL, tables of their own, dropped
// after a clean run) and, for gRPC, the test Redis; they kill only processes they started.
//
//	go run ./cmd/idemchaos grpc                 # 2 servers, 8 clients, 2000 calls, 6 kills
//	go run ./cmd/idemchaos dtm-msg              # 60 publishers, kills at every point
//
// Exit codes as for the main run: 0 clean, 1 violations, 2 harness failure.
func runSuite(args []string) (int, bool) {
	if len(args) == 0 || (args[0] != "grpc" && args[0] != "dtm-msg") {
		return 0, false
	}
	suite, args := args[0], args[1:]
	fs := flag.NewFlagSet("idemchaos "+suite, flag.ExitOnError)
	jsonOut := fs.String("json", "", "also write the report as JSON to this file")
	quiet := fs.Bool("q", false, "no progress lines")
	dsn := fs.String("dsn", envOr("IDEMKIT_TEST_MYSQL", "root:@tcp(127.0.0.1:3306)/")+"idemkit_test", "MariaDB DSN with the database")
	seed := fs.Uint64("seed", 0, "seed of the load (0: from the clock)")
	var rc chaosrpc.Config
	var mc chaosdtmmsg.Config
	if suite == "grpc" {
		fs.StringVar(&rc.Redis, "redis", envOr("IDEMKIT_TEST_REDIS", chaosrpc.DefaultRedis), `Redis for the Locker of every other server ("-" for none)`)
		fs.IntVar(&rc.Servers, "servers", chaosrpc.DefaultServers, "server processes")
		fs.IntVar(&rc.Clients, "clients", chaosrpc.DefaultClients, "concurrent clients")
		fs.IntVar(&rc.Ops, "calls", chaosrpc.DefaultOps, "logical calls")
		fs.Float64Var(&rc.DupRate, "dup", chaosrpc.DefaultDupRate, "share of calls repeating an earlier key")
		fs.IntVar(&rc.Kills, "kills", chaosrpc.DefaultKills, "server SIGKILLs (negative: none)")
		fs.BoolVar(&rc.Bare, "sabotage-bare", false, "serve without the guard (violations expected)")
	} else {
		fs.StringVar(&mc.DTM, "dtm", "", "a running DTM server's API base (default: start one)")
		fs.IntVar(&mc.Publications, "publications", chaosdtmmsg.DefaultPublications, "publisher processes")
		fs.IntVar(&mc.Parallel, "parallel", chaosdtmmsg.DefaultParallel, "publishers at once")
		fs.Float64Var(&mc.DupRate, "dup", chaosdtmmsg.DefaultDupRate, "share of publications repeating an earlier key")
		fs.Float64Var(&mc.KillRate, "kill-rate", chaosdtmmsg.DefaultKillRate, "share of publishers SIGKILLed")
		fs.BoolVar(&mc.BrokenBackCheck, "sabotage-backcheck", false, "a back-check that always says SUCCESS (violations expected)")
	}
	_ = fs.Parse(args)
	logger := log.New(os.Stderr, "idemchaos ", log.Ltime|log.Lmicroseconds)
	logf := logger.Printf
	if *quiet {
		logf = func(string, ...any) {}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	var rep interface{ Summary() string }
	var violations int
	var err error
	if suite == "grpc" {
		rc.DSN, rc.Seed, rc.Logf = *dsn, *seed, logf
		var r *chaosrpc.Report
		r, err = chaosrpc.Run(ctx, &rc)
		if r != nil {
			rep, violations = r, len(r.Violations)
		}
	} else {
		mc.DSN, mc.Seed, mc.Logf = *dsn, *seed, logf
		var r *chaosdtmmsg.Report
		r, err = chaosdtmmsg.Run(ctx, &mc)
		if r != nil {
			rep, violations = r, len(r.Violations)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "idemchaos %s: %v (after %s)\n", suite, err, time.Since(start).Round(time.Second))
		return 2, true
	}
	fmt.Print(rep.Summary())
	fmt.Printf("  (%s)\n", time.Since(start).Round(time.Second))
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "idemchaos: writing %s: %v\n", *jsonOut, err)
		}
	}
	if violations > 0 {
		return 1, true
	}
	return 0, true
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
