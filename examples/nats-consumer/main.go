// Command nats-consumer is a runnable example of an idempotent NATS JetStream consumer: payments
// arrive as messages, each credits an account in MariaDB, and msgx makes every payment take effect
// exactly once however often it is published or delivered.
//
//	go run ./examples/nats-consumer                    # NATS 127.0.0.1:4222, MariaDB 127.0.0.1:3306, Redis 127.0.0.1:6379
//	go run ./examples/nats-consumer -n 200 -workers 8 -keep
//	go run ./examples/nats-consumer -h                 # the flags; any argument or bad value is refused (exit 2)
//
// The database is idemkit_test, which must exist: ./scripts/services.sh creates it, or run
// mysql -uroot -e 'CREATE DATABASE idemkit_test', or name another with -mysql.
//
// It creates a stream, a dead-letter stream and tables with names unique to the run, publishes -n
// payments (a third of them twice with the same Nats-Msg-Id, after JetStream's duplicate window, so
// that only idemkit can catch them), one payment without a Nats-Msg-Id and one with an invalid
// amount, consumes them with msgx in Tx mode (the credit and the record commit together), prints what
// happened and checks it: every payment applied once, duplicates acknowledged without running, the
// invalid payment REJECTED and dead-lettered, the one without an id dead-lettered. It exits 1 if a
// check fails. Everything it created is removed at the end unless -keep.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idemkit/examples/internal/paydemo"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// Config is the example's configuration: the NATS server, and the database, Redis and the run's
// size (paydemo.Config).
type Config struct {
	NATS string
	paydemo.Config
}

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `Usage: go run ./examples/nats-consumer [flags]

Publishes payments to a JetStream stream (a third of them twice with the same Nats-Msg-Id, one
without an id, one invalid) and consumes them with msgx in Tx mode, each payment crediting an
account in MariaDB once. It prints what happened and exits 0 when every payment took effect exactly
once, 1 otherwise. It needs NATS with JetStream, MariaDB (the database must exist: mysql -uroot -e
'CREATE DATABASE idemkit_test') and, unless -redis "", Redis. The stream, the dead-letter stream and
the tables it creates are removed at the end unless -keep.

Flags:
`

// cli is main with its command line (without the program name) and its output given, returning the
// exit code: 0 after -h or a run whose checks held, 2 for a command line it refuses, 1 otherwise.
func cli(args []string, stdout, stderr io.Writer) int {
	var c Config
	fs := flag.NewFlagSet("nats-consumer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.NATS, "nats", "nats://127.0.0.1:4222", "NATS server with JetStream")
	c.RegisterFlags(fs, "keep the stream and tables")
	if err := c.Parse(fs, args, usage); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // Parse printed why, and the usage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := Run(ctx, c, stdout); err != nil {
		fmt.Fprintln(stderr, "nats-consumer:", err)
		return 1
	}
	return 0
}

// Run runs the example and returns an error when something failed or a check did not hold.
func Run(ctx context.Context, c Config, out io.Writer) error {
	// The business: accounts, a ledger and the record table in MariaDB, the Guard, the handler.
	demo, err := paydemo.Open(ctx, "natsdemo", c.Config)
	if err != nil {
		return err
	}
	defer demo.Close(ctx)
	run := demo.Run

	// The broker: a stream for payments (the shortest duplicate window JetStream allows, so the demo
	// can publish an id again after it), a dead-letter stream, a durable pull consumer.
	nc, err := nats.Connect(c.NATS)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream, dlq := run, run+"_dlq"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{run + ".payments"}, Duplicates: 100 * time.Millisecond}); err != nil {
		return err
	}
	dlqStream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: dlq, Subjects: []string{run + ".dead"}})
	if err != nil {
		return err
	}
	if !c.Keep {
		defer js.DeleteStream(context.WithoutCancel(ctx), dlq)
		defer js.DeleteStream(context.WithoutCancel(ctx), stream)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "payments", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
	})
	if err != nil {
		return err
	}

	// Publish: every payment once, one payment without an id and one with an invalid amount, then a
	// third of the payments again after the duplicate window.
	publish := func(m paydemo.Message) error {
		msg := nats.NewMsg(run + ".payments")
		msg.Data = m.Body
		var opts []jetstream.PublishOpt
		if m.ID != "" {
			opts = append(opts, jetstream.WithMsgID(m.ID))
		}
		_, err := js.PublishMsg(ctx, msg, opts...)
		return err
	}
	payments := paydemo.NewPayments(c.N)
	for _, m := range payments.First {
		if err := publish(m); err != nil {
			return err
		}
	}
	time.Sleep(150 * time.Millisecond) // past JetStream's duplicate window
	for _, m := range payments.Again {
		if err := publish(m); err != nil {
			return err
		}
	}

	// Consume until every delivery was settled; rejected and poison messages go to the dead-letter stream.
	counts, err := paydemo.Consume(ctx, payments.Deliveries(), func(ctx context.Context, observe func(*msgx.Message, msgx.Decision)) error {
		return natsjs.Consume(ctx, js, cons, demo.Handle, &natsjs.Options{
			Workers:           c.Workers,
			DeadLetterSubject: run + ".dead",
			Observe:           observe,
		})
	})
	if err != nil {
		return err
	}

	// What happened, and the checks.
	info, err := dlqStream.Info(ctx)
	if err != nil {
		return err
	}
	return demo.Check(ctx, out, paydemo.Result{
		Payments:    payments,
		Counts:      counts,
		Scope:       stream + "/payments",
		MessageID:   "Nats-Msg-Id",
		DeadLetters: "stream " + dlq,
		Dead:        int(info.State.Msgs),
	})
}
