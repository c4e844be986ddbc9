// Command order-pay-inventory is idemkit's runnable example: an order service, a payment service and an
// inventory service coordinated by DTM, with orders created through a saga or a TCC.
//
//	go run ./examples/order-pay-inventory              # the tour: scripted, narrated, checked; exit 0 when all is well
//	go run ./examples/order-pay-inventory serve        # just run the services
//	go run ./examples/order-pay-inventory help         # flags and environment variables
//
// With no configuration it needs no external service: SQLite files in a data directory, an in-process
// lock and cache, and a DTM server child process built on first use. Flags or IDEMKIT_DEMO_*
// environment variables point it at MySQL/MariaDB, Redis and an external DTM server instead. See
// README.md.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usageText = `Usage:
  order-pay-inventory [tour] [flags]   run the scripted tour (the default) and exit 0 when every step behaved
  order-pay-inventory serve [flags]    run the services until interrupted
  order-pay-inventory help             this text

Every flag can also be set by its environment variable; a flag wins over its variable.
`

// run is main with its exit code returned.
func run(args []string, stdout, stderr io.Writer) int {
	cmd := "tour"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var cfg Config
	var keep bool
	var fs *flag.FlagSet
	switch cmd {
	case "tour":
		fs = cfg.flagSet("tour", true, &keep)
	case "serve":
		fs = cfg.flagSet("serve", false, nil)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usageText)
		var c Config
		var k bool
		for _, f := range []*flag.FlagSet{c.flagSet("tour", true, &k), c.flagSet("serve", false, nil)} {
			fmt.Fprintf(stdout, "\n%s flags:\n", f.Name())
			f.SetOutput(stdout)
			f.PrintDefaults()
		}
		return 0
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", cmd, usageText)
		return 2
	}
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fmt.Fprintf(stderr, "\n%s flags:\n", cmd)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %q\n", fs.Args())
		return 2
	}
	if err := envErrors(fs); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}

	if cmd == "serve" {
		return serve(ctx, cfg, RunOptions{BuildProgress: stderr}, stdout, stderr)
	}
	return tourMain(ctx, cfg, keep, stdout, stderr)
}

// tourMain runs the tour in cfg.DataDir, or in a fresh temporary directory removed afterwards (unless
// keep).
func tourMain(ctx context.Context, cfg Config, keep bool, stdout, stderr io.Writer) int {
	if cfg.DataDir == "" && cfg.DB == "" {
		dir, err := os.MkdirTemp("", "idemkit-demo-*")
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		cfg.DataDir = dir
		if keep {
			defer fmt.Fprintf(stdout, "The data directory is kept: %s\n", dir)
		} else {
			defer os.RemoveAll(dir)
		}
	}
	level := slog.LevelWarn
	_ = level.UnmarshalText([]byte(cmp.Or(cfg.LogLevel, "warn")))
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	err := runTour(ctx, cfg, stdout, logger)
	switch {
	case err == nil:
		return 0
	case ctx.Err() != nil:
		fmt.Fprintln(stdout, "\nThe tour was interrupted.")
		return 130
	default:
		fmt.Fprintf(stdout, "\nThe tour FAILED: %v\n", err)
		return 1
	}
}

// serve runs the services with ro until ctx ends (SIGINT, SIGTERM) or the server fails.
func serve(ctx context.Context, cfg Config, ro RunOptions, stdout, stderr io.Writer) int {
	svc, err := Start(ctx, cfg, ro)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "order-pay-inventory serving on %s (DTM calls back %s)\n", svc.URL, svc.Cfg.PublicURL)
	fmt.Fprintf(stdout, "  database   %s\n  lock/cache %s\n  DTM        %s\n", svc.db.where, svc.lockDescription(), svc.dtm.describe())
	code := 0
	select {
	case <-ctx.Done():
	case err := <-svc.Done():
		fmt.Fprintln(stderr, err)
		code = 1
	}
	if err := svc.Close(); err != nil {
		fmt.Fprintln(stderr, err)
		code = 1
	}
	return code
}
