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
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idemkit/internal/msgchaos"
)

// runMsg is `idemchaos msg`: the message-consumer chaos run (package internal/msgchaos) on each
// broker named by -brokers. It exits 0 when no run found a violation, 1 when one did, 2 when a run
// could not be done.
func runMsg(args []string) int {
	fs := flag.NewFlagSet("idemchaos msg", flag.ExitOnError)
	var (
		c       msgchaos.Config
		brokers string
		jsonOut string
		quiet   bool
	)
	fs.StringVar(&brokers, "brokers", "nats,amqp", "brokers to run against, comma-separated: nats, amqp")
	fs.IntVar(&c.Messages, "messages", msgchaos.DefaultMessages, "distinct messages published")
	fs.Float64Var(&c.DupRate, "dup-rate", msgchaos.DefaultDupRate, "share of messages published two or three times")
	fs.IntVar(&c.Consumers, "consumers", msgchaos.DefaultConsumers, "consumer processes")
	fs.IntVar(&c.Workers, "workers", msgchaos.DefaultWorkers, "workers per consumer process")
	fs.IntVar(&c.Kills, "kills", msgchaos.DefaultKills, "consumer processes SIGKILLed and replaced during the run")
	fs.IntVar(&c.Batches, "batches", msgchaos.DefaultBatches, "publishing batches")
	fs.DurationVar(&c.BatchGap, "batch-gap", msgchaos.DefaultBatchGap, "time between two publishing batches (at least 150ms)")
	fs.DurationVar(&c.Lease, "lease", msgchaos.DefaultLease, "idemkit Options.Lease of the consumers")
	fs.DurationVar(&c.Settle, "settle", msgchaos.DefaultSettle, "bound on the wait for every message to settle")
	fs.IntVar(&c.NATSMaxDeliver, "nats-max-deliver", 0, "MaxDeliver of the NATS consumer (0: unlimited); every other kill then lands on a message's last delivery, settled from the MAX_DELIVERIES advisory")
	fs.StringVar((*string)(&c.Sabotage), "sabotage", "", "break the consumer on purpose: unguarded or ack-first (violations expected)")
	fs.Int64Var(&c.Seed, "seed", 0, "seed of the publishing order and the kill schedule (0: from the clock)")
	fs.BoolVar(&c.Keep, "keep", false, "keep the tables, stream and queues")
	fs.StringVar(&jsonOut, "json", "", "also write the reports as JSON to this file")
	fs.BoolVar(&quiet, "q", false, "no progress lines")
	_ = fs.Parse(args)
	logger := log.New(os.Stderr, "idemchaos msg ", log.Ltime|log.Lmicroseconds)
	if !quiet {
		c.Logf = logger.Printf
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	code := 0
	var reports []*msgchaos.Report
	for _, b := range strings.Split(brokers, ",") {
		rc := c
		rc.Broker = strings.TrimSpace(b)
		start := time.Now()
		rep, err := msgchaos.Run(ctx, &rc)
		if err != nil {
			fmt.Fprintf(os.Stderr, "idemchaos msg: %s: %v (after %s)\n", rc.Broker, err, time.Since(start).Round(time.Second))
			return 2
		}
		fmt.Print(rep.Summary())
		reports = append(reports, rep)
		if len(rep.Violations) > 0 {
			code = 1
		}
	}
	if jsonOut != "" {
		b, _ := json.MarshalIndent(reports, "", "  ")
		if err := os.WriteFile(jsonOut, b, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "idemchaos msg: writing %s: %v\n", jsonOut, err)
		}
	}
	return code
}
