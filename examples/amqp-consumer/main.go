// Command amqp-consumer is a runnable example of an idempotent RabbitMQ consumer: payments
// arrive as messages, each credits an account in MariaDB, and msgx makes every payment take effect
// exactly once however often it is published or delivered.
//
//	go run ./examples/amqp-consumer                    # RabbitMQ 127.0.0.1:5672, MariaDB 127.0.0.1:3306, Redis 127.0.0.1:6379
//	go run ./examples/amqp-consumer -n 200 -workers 8 -keep
//	go run ./examples/amqp-consumer -h                 # the flags; any argument or bad value is refused (exit 2)
//
// The database is idemkit_test, which must exist: ./scripts/services.sh creates it, or run
// mysql -uroot -e 'CREATE DATABASE idemkit_test', or name another with -mysql.
//
// It declares a quorum queue with a dead-letter exchange and queue, and tables, with names unique to the
// run, publishes -n persistent payments with publisher confirms (a third of them twice with the same
// message-id: RabbitMQ has no publish-side deduplication), one payment without a message-id and one
// with an invalid amount, consumes them with msgx in Tx mode (the credit and the record commit
// together), prints what
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
	"slices"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idemkit/examples/internal/paydemo"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/amqp"
)

// Config is the example's configuration: the RabbitMQ server, and the database, Redis and the run's
// size (paydemo.Config).
type Config struct {
	AMQP string
	paydemo.Config
}

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `Usage: go run ./examples/amqp-consumer [flags]

Publishes payments to a RabbitMQ quorum queue (a third of them twice with the same message-id, one
without an id, one invalid) and consumes them with msgx in Tx mode, each payment crediting an
account in MariaDB once. It prints what happened and exits 0 when every payment took effect exactly
once, 1 otherwise. It needs RabbitMQ, MariaDB (the database must exist: mysql -uroot -e 'CREATE
DATABASE idemkit_test') and, unless -redis "", Redis. The queues, the exchange and the tables it
creates are removed at the end unless -keep.

Flags:
`

// cli is main with its command line (without the program name) and its output given, returning the
// exit code: 0 after -h or a run whose checks held, 2 for a command line it refuses, 1 otherwise.
func cli(args []string, stdout, stderr io.Writer) int {
	var c Config
	fs := flag.NewFlagSet("amqp-consumer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.AMQP, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ server")
	c.RegisterFlags(fs, "keep the queues, the exchange and the tables")
	if err := c.Parse(fs, args, usage); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // Parse printed why, and the usage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := Run(ctx, c, stdout); err != nil {
		fmt.Fprintln(stderr, "amqp-consumer:", err)
		return 1
	}
	return 0
}

// Run runs the example and returns an error when something failed or a check did not hold.
func Run(ctx context.Context, c Config, out io.Writer) error {
	// The business: accounts, a ledger and the record table in MariaDB, the Guard, the handler.
	demo, err := paydemo.Open(ctx, "amqpdemo", c.Config)
	if err != nil {
		return err
	}
	defer demo.Close(ctx)

	// The broker: a durable quorum queue (it counts deliveries, so msgx's retry backoff grows and
	// MaxAttempts works) whose dead letters go to <queue>.dlx → <queue>.dlq, a confirming channel to
	// publish on and one to consume from.
	conn, err := amqp091.Dial(c.AMQP)
	if err != nil {
		return err
	}
	defer conn.Close()
	pub, err := conn.Channel()
	if err != nil {
		return err
	}
	topo, err := amqp.Declare(pub, demo.Run, amqp091.Table{"x-queue-type": "quorum"})
	if err != nil {
		return err
	}
	if !c.Keep {
		defer func() {
			if ch, err := conn.Channel(); err == nil {
				_ = topo.Delete(ch)
				_ = ch.Close()
			}
		}()
	}
	if err := pub.Confirm(false); err != nil {
		return err
	}

	// Publish: every payment once, one payment without an id and one with an invalid amount, then a
	// third of the payments again; each persistent and confirmed by the broker.
	publish := func(m paydemo.Message) error {
		dc, err := pub.PublishWithDeferredConfirmWithContext(ctx, "", topo.Queue, false, false,
			amqp091.Publishing{MessageId: m.ID, DeliveryMode: amqp091.Persistent, ContentType: "application/json", Body: m.Body})
		if err != nil {
			return err
		}
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			return fmt.Errorf("publish not confirmed: %v", err)
		}
		return nil
	}
	payments := paydemo.NewPayments(c.N)
	for _, m := range slices.Concat(payments.First, payments.Again) {
		if err := publish(m); err != nil {
			return err
		}
	}

	// Consume until every delivery was settled; rejected and poison messages are dead-lettered.
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	counts, err := paydemo.Consume(ctx, payments.Deliveries(), func(ctx context.Context, observe func(*msgx.Message, msgx.Decision)) error {
		return amqp.Consume(ctx, ch, topo.Queue, demo.Handle, &amqp.Options{
			Workers: c.Workers,
			Observe: observe,
		})
	})
	if err != nil {
		return err
	}

	// What happened, and the checks. The dead-letter exchange routes asynchronously: give it a moment.
	var dead amqp091.Queue
	for range 50 {
		if dead, err = pub.QueueDeclarePassive(topo.DeadLetterQueue, true, false, false, false, nil); err != nil || dead.Messages >= 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	return demo.Check(ctx, out, paydemo.Result{
		Payments:    payments,
		Counts:      counts,
		Scope:       topo.Queue,
		MessageID:   "message-id",
		DeadLetters: "queue " + topo.DeadLetterQueue,
		Dead:        dead.Messages,
	})
}
