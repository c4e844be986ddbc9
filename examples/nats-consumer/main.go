// Command nats-consumer is a runnable example of an idempotent NATS JetStream consumer: payments
// arrive as messages, each credits an account in MariaDB, and msgx makes every payment take effect
// exactly once however often it is published or delivered.
//
//	go run ./examples/nats-consumer                    # NATS 127.0.0.1:4222, MariaDB 127.0.0.1:3306, Redis 127.0.0.1:6379
//	go run ./examples/nats-consumer -n 200 -workers 8 -keep
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
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
	"github.com/idemkit/idemkit/record"
)

// Config is the example's configuration.
type Config struct {
	NATS, MySQL, Redis string
	N, Workers         int
	Keep               bool
}

func main() {
	var c Config
	flag.StringVar(&c.NATS, "nats", "nats://127.0.0.1:4222", "NATS server with JetStream")
	flag.StringVar(&c.MySQL, "mysql", "root:@tcp(127.0.0.1:3306)/idemkit_test", "MariaDB/MySQL DSN of an existing database")
	flag.StringVar(&c.Redis, "redis", "127.0.0.1:6379", `Redis for the lock in front of the records ("" for none)`)
	flag.IntVar(&c.N, "n", 60, "payments to publish")
	flag.IntVar(&c.Workers, "workers", 4, "messages handled at once")
	flag.BoolVar(&c.Keep, "keep", false, "keep the stream and tables")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := Run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nats-consumer:", err)
		os.Exit(1)
	}
}

// payment is the message body.
type payment struct {
	Account int   `json:"account"`
	Amount  int64 `json:"amount"`
}

// Run runs the example and returns an error when something failed or a check did not hold.
func Run(ctx context.Context, c Config, out io.Writer) error {
	var b [4]byte
	_, _ = rand.Read(b[:])
	run := "natsdemo_" + hex.EncodeToString(b[:])

	// The database: records, accounts and a ledger of applied payments.
	db, err := gorm.Open(mysql.Open(c.MySQL), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	records, err := record.New(db, &record.Options{Table: run + "_records"})
	if err != nil {
		return err
	}
	if err := records.CreateTable(ctx); err != nil {
		return err
	}
	accounts, ledger := run+"_accounts", run+"_ledger"
	for _, ddl := range []string{
		"CREATE TABLE " + accounts + " (id INT PRIMARY KEY, balance BIGINT NOT NULL)",
		"CREATE TABLE " + ledger + " (payment_id VARCHAR(64) NOT NULL, account INT NOT NULL, amount BIGINT NOT NULL)",
		"INSERT INTO " + accounts + " (id, balance) VALUES (1, 0), (2, 0), (3, 0)",
	} {
		if err := db.Exec(ddl).Error; err != nil {
			return err
		}
	}
	if !c.Keep {
		defer db.Exec("DROP TABLE IF EXISTS " + accounts + ", " + ledger + ", " + run + "_records")
	}

	// The guard: records in MariaDB, a Redis lock in front (optional).
	var gopts idemkit.Options
	if c.Redis != "" {
		rdb := redis.NewClient(&redis.Options{Addr: c.Redis, ContextTimeoutEnabled: true})
		defer rdb.Close()
		if !c.Keep { // the lock and the cached results of the run's keys
			defer func() {
				ctx := context.WithoutCancel(ctx)
				iter := rdb.Scan(ctx, 0, run+":*", 1000).Iterator()
				for iter.Next(ctx) {
					rdb.Del(ctx, iter.Val())
				}
			}()
		}
		gopts.Locker = lock.New(rdb, &lock.Options{Prefix: run + ":"})
		gopts.FailOpen = true
	}
	guard, err := idemkit.New(records, &gopts)
	if err != nil {
		return err
	}
	mg, err := msgx.New(guard, &msgx.Options{RetryDelay: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	// The handler: credit the account and write the ledger row, in the transaction msgx gives it.
	errInvalid := errors.New("invalid amount")
	handle := mg.Tx(db, records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
		var p payment
		if err := json.Unmarshal(m.Data, &p); err != nil {
			return idemkit.Permanent(err)
		}
		if p.Amount <= 0 {
			return idemkit.Permanent(errInvalid)
		}
		if err := tx.Exec("UPDATE "+accounts+" SET balance = balance + ? WHERE id = ?", p.Amount, p.Account).Error; err != nil {
			return err
		}
		return tx.Exec("INSERT INTO "+ledger+" (payment_id, account, amount) VALUES (?, ?, ?)", m.ID, p.Account, p.Amount).Error
	})

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

	// Publish: every payment once, a third of them again after the duplicate window, one payment
	// without an id and one with an invalid amount.
	var want int64
	publish := func(id string, p payment) error {
		m := nats.NewMsg(run + ".payments")
		m.Data, _ = json.Marshal(p)
		var opts []jetstream.PublishOpt
		if id != "" {
			opts = append(opts, jetstream.WithMsgID(id))
		}
		_, err := js.PublishMsg(ctx, m, opts...)
		return err
	}
	for i := range c.N {
		p := payment{Account: 1 + i%3, Amount: int64(10 + i)}
		want += p.Amount
		if err := publish(fmt.Sprintf("pay-%d", i), p); err != nil {
			return err
		}
	}
	if err := publish("", payment{Account: 1, Amount: 5}); err != nil {
		return err
	}
	if err := publish("pay-invalid", payment{Account: 2, Amount: -5}); err != nil {
		return err
	}
	time.Sleep(150 * time.Millisecond) // past JetStream's duplicate window
	dups := 0
	for i := 0; i < c.N; i += 3 {
		if err := publish(fmt.Sprintf("pay-%d", i), payment{Account: 1 + i%3, Amount: int64(10 + i)}); err != nil {
			return err
		}
		dups++
	}
	deliveries := c.N + 2 + dups

	// Consume until every delivery was settled.
	var mu sync.Mutex
	counts := map[msgx.Outcome]int{}
	settled := make(chan struct{})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = natsjs.Consume(cctx, js, cons, handle, &natsjs.Options{
		Workers:           c.Workers,
		DeadLetterSubject: run + ".dead",
		Observe: func(m *msgx.Message, d msgx.Decision) {
			mu.Lock()
			defer mu.Unlock()
			counts[d.Outcome]++
			if n := counts[msgx.Processed] + counts[msgx.Duplicate] + counts[msgx.Rejected] + counts[msgx.Poison]; n == deliveries {
				close(settled)
				cancel()
			}
		},
	})
	if err != nil {
		return err
	}
	select {
	case <-settled:
	default:
		return fmt.Errorf("interrupted: %v", ctx.Err())
	}

	// What happened, and the checks.
	var rows, applied, balances int64
	if err := db.Raw("SELECT count(*), coalesce(sum(amount), 0) FROM "+ledger).Row().Scan(&rows, &applied); err != nil {
		return err
	}
	if err := db.Raw("SELECT sum(balance) FROM " + accounts).Row().Scan(&balances); err != nil {
		return err
	}
	rec, err := guard.Get(ctx, stream+"/payments", "pay-invalid")
	if err != nil {
		return err
	}
	info, err := dlqStream.Info(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "published %d messages: %d payments, %d of them again with the same Nats-Msg-Id, 1 without an id, 1 invalid\n", deliveries, c.N, dups)
	fmt.Fprintf(out, "outcomes: %d processed, %d duplicates acknowledged without running, %d rejected, %d poison, %d retried (in flight or failed)\n",
		counts[msgx.Processed], counts[msgx.Duplicate], counts[msgx.Rejected], counts[msgx.Poison], counts[msgx.InFlight]+counts[msgx.Failed])
	fmt.Fprintf(out, "ledger: %d rows, %d credited; balances sum to %d; expected %d rows and %d\n", rows, applied, balances, c.N, want)
	fmt.Fprintf(out, "pay-invalid is %s; the dead-letter stream %s holds %d messages\n", rec.Status, dlq, info.State.Msgs)
	var errs []error
	if rows != int64(c.N) || applied != want || balances != want || counts[msgx.Processed] != c.N || counts[msgx.Duplicate] != dups {
		errs = append(errs, errors.New("a payment was lost or applied twice"))
	}
	if rec.Status != idemkit.StatusRejected || counts[msgx.Rejected] != 1 || counts[msgx.Poison] != 1 || info.State.Msgs != 2 {
		errs = append(errs, errors.New("the invalid payment or the one without an id was not dead-lettered"))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintln(out, "every payment took effect exactly once")
	return nil
}
