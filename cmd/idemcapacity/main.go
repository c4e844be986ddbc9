//go:build linux

// Command idemcapacity measures the figures of idemkit's capacity model (docs/SCALING.md) on private
// servers it starts and stops on this machine — a MariaDB, a Redis and, with -galera, a 3-node
// Galera cluster — and prints them as Markdown, with the sizing they imply. With -update it replaces
// the generated block of a document in place; -json writes the raw figures.
//
//	go run ./cmd/idemcapacity                                  # print the block
//	go run ./cmd/idemcapacity -galera -update docs/SCALING.md  # what ./scripts/cluster.sh capacity runs
//	go run ./cmd/idemcapacity -records 10000 -duration 3s      # a quick look
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/idemkit/idemkit/internal/capacity"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "idemcapacity:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		o      capacity.Options
		label  = flag.String("label", "", `what is measured, printed with the figures (default "write path v2 at commit <HEAD>")`)
		update = flag.String("update", "", "replace the generated block of this Markdown file")
		jsonTo = flag.String("json", "", "also write the raw figures as JSON to this file")
	)
	flag.IntVar(&o.Records, "records", capacity.DefaultRecords, "records per size and sweeper measurement, keys per Redis measurement")
	flag.DurationVar(&o.Duration, "duration", capacity.DefaultDuration, "length of each write-throughput measurement")
	flag.IntVar(&o.Concurrency, "c", capacity.DefaultConcurrency, "concurrent callers")
	flag.IntVar(&o.ResultSize, "result", capacity.DefaultResultSize, "bytes of a stored result")
	flag.IntVar(&o.Rounds, "rounds", capacity.DefaultRounds, "interleaved rounds of write measurements (each mode reports its median)")
	flag.BoolVar(&o.Galera, "galera", false, "also measure Tx and Execute modes on a 3-node Galera cluster")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	o.Log = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	r, err := capacity.Measure(ctx, &o)
	if err != nil {
		return err
	}
	commit := head()
	r.Commit = commit
	if *label == "" {
		*label = "write path v2 at commit " + commit
	}
	block := r.Markdown(*label)
	fmt.Print(block)
	if *jsonTo != "" {
		b, _ := json.MarshalIndent(r, "", "  ")
		if err := os.WriteFile(*jsonTo, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if *update != "" {
		if err := capacity.UpdateDoc(*update, block); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "idemcapacity: updated %s\n", *update)
	}
	return nil
}

// head returns the short commit of the working tree, with "+dirty" when it has changes, or "unknown".
func head() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += "+dirty"
	}
	return c
}
