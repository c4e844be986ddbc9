//go:build unix

package msgchaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/amqp"
	"github.com/idemkit/idemkit/msgx/natsjs"
	"github.com/idemkit/idemkit/record"
)

// WorkerEnv is the environment variable that makes a process a consumer of a run; its value is
// the worker's configuration in JSON.
const WorkerEnv = "IDEMKIT_MSGCHAOS_WORKER"

// Worker retry delays: short, so that a run settles quickly.
const (
	workerRetryDelay    = 100 * time.Millisecond
	workerMaxRetryDelay = time.Second
)

// workerSpec is what a consumer process needs.
type workerSpec struct {
	Broker     string
	URL        string
	Names      brokerNames
	AckWait    time.Duration
	MySQLDSN   string
	Tables     tables
	RedisAddr  string
	Prefix     string
	Lease      time.Duration
	Workers    int
	Sabotage   Sabotage
	MaxDeliver int // the NATS consumer's MaxDeliver, 0 unlimited: KillLast traps only a delivery at it
	ConsumerID int
	// NoLocker runs the consumer's Guard without the Redis Locker: its duplicates meet the other
	// consumers' in the database only (every other consumer process, see startConsumer).
	NoLocker bool
}

// tables of a run.
type tables struct{ Records, Effects, Totals string }

// RunWorkerIfRequested runs a consumer and exits the process when it was started by [Run] as one
// (WorkerEnv is set); otherwise it returns at once. Call it first thing in main, and in TestMain of
// test binaries that call Run.
func RunWorkerIfRequested() {
	v, ok := os.LookupEnv(WorkerEnv)
	if !ok {
		return
	}
	os.Exit(workerMain(v))
}

// out writes whole lines to stdout, the harness's view of the worker:
//
//	ready               consuming
//	d <outcome>         a decision, after its outcome is durable and before the broker is told
//	inside <id>         an armed worker is inside a handler after its writes, before the commit, and waits to be killed
//	last <id>           likewise, on <id>'s last delivery (MaxDeliver)
//	committed <id>      an armed worker committed <id> and waits to be killed before the ack
//	a <outcome> <seq>   the decision on the message at stream sequence <seq>, settled from a MAX_DELIVERIES
//	                    advisory (also a "d" line)
//	g <how> <id>        a GaveUp decision on <id> (also a "d" line): how is advisory (settled from the
//	                    advisory), in-flight (a last delivery found the key held) or other
type out struct{ mu sync.Mutex }

func (o *out) line(format string, args ...any) {
	o.mu.Lock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
	o.mu.Unlock()
}

var errFlaky = errors.New("msgchaos: flaky failure")

func workerMain(raw string) int {
	var spec workerSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "msgchaos worker: bad %s: %v\n", WorkerEnv, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := runWorker(spec, log); err != nil {
		log.Error("msgchaos worker", "consumer", spec.ConsumerID, "error", err)
		return 1
	}
	return 0
}

func runWorker(spec workerSpec, log *slog.Logger) error {
	// The harness ends a worker by closing its stdin (or by SIGKILL); "arm <mode>" lines arm a trap.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var armed atomic.Value // KillMode or ""
	armed.Store(KillMode(""))
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if m, ok := strings.CutPrefix(sc.Text(), "arm "); ok {
				armed.Store(KillMode(m))
			}
		}
		cancel()
	}()
	trap := func(mode KillMode) bool { return armed.CompareAndSwap(mode, KillMode("")) }

	db, err := gorm.Open(mysql.Open(spec.MySQLDSN), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	sqlDB.SetMaxOpenConns(spec.Workers * 2)
	records, err := record.New(db, &record.Options{Table: spec.Tables.Records})
	if err != nil {
		return err
	}
	opts := &idemkit.Options{Lease: spec.Lease, Logger: log}
	if !spec.NoLocker {
		rdb := redis.NewClient(&redis.Options{Addr: spec.RedisAddr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		opts.Locker = lock.New(rdb, &lock.Options{Prefix: spec.Prefix})
	}
	guard, err := idemkit.New(records, opts)
	if err != nil {
		return err
	}
	mg, err := msgx.New(guard, &msgx.Options{Scope: "msgchaos", RetryDelay: workerRetryDelay, MaxRetryDelay: workerMaxRetryDelay, Logger: log})
	if err != nil {
		return err
	}
	o := &out{}

	// The business: one effect row and the running totals, in the transaction msgx gives it.
	business := func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
		var b body
		if err := json.Unmarshal(m.Data, &b); err != nil {
			return idemkit.Permanent(err)
		}
		if b.Kind == kindFlaky && m.Attempt == 1 {
			return errFlaky
		}
		if err := tx.Exec("INSERT INTO "+spec.Tables.Effects+" (msg_id, amount, consumer) VALUES (?, ?, ?)", m.ID, b.Amount, spec.ConsumerID).Error; err != nil {
			return err
		}
		if err := tx.Exec("UPDATE "+spec.Tables.Totals+" SET total = total + ?, n = n + 1 WHERE id = 1", b.Amount).Error; err != nil {
			return err
		}
		if b.Kind == kindReject {
			return idemkit.Permanent(errors.New("msgchaos: rejected by the business")) // its writes must roll back
		}
		if trap(KillInside) {
			o.line("inside %s", m.ID)
			<-make(chan struct{}) // the harness kills this process now
		}
		if spec.MaxDeliver > 0 && m.Attempt >= spec.MaxDeliver && trap(KillLast) {
			o.line("last %s", m.ID) // the server drops the message once AckWait runs out
			<-make(chan struct{})
		}
		return nil
	}
	handle := mg.Tx(db, records, business)
	switch spec.Sabotage {
	case SabotageUnguarded:
		handle = unguarded(db, business)
	case SabotageAckFirst:
		handle = mg.Tx(db, records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
			switch raw := m.Raw.(type) {
			case jetstream.Msg:
				_ = raw.Ack()
			case *amqp091.Delivery:
				_ = raw.Ack(false)
			}
			return business(ctx, tx, m)
		})
	}
	observe := func(m *msgx.Message, d msgx.Decision) {
		o.line("d %s", d.Outcome)
		// natsjs settles a message the server dropped at MaxDeliver from the stream: Raw is the
		// *jetstream.RawStreamMsg rather than a delivery.
		raw, fromAdvisory := m.Raw.(*jetstream.RawStreamMsg)
		if fromAdvisory {
			o.line("a %s %d", d.Outcome, raw.Sequence)
		}
		if d.Outcome == msgx.GaveUp {
			how := "other"
			switch {
			case fromAdvisory:
				how = "advisory"
			case errors.Is(d.Err, idemkit.ErrInFlight):
				how = "in-flight"
			}
			o.line("g %s %s", how, m.ID)
		}
		if d.Outcome == msgx.Processed && trap(KillCommitted) {
			o.line("committed %s", m.ID)
			<-make(chan struct{}) // killed after the commit, before the ack
		}
	}

	switch spec.Broker {
	case BrokerNATS:
		nc, err := nats.Connect(spec.URL, nats.Name(fmt.Sprintf("idemkit-msgchaos-%d", spec.ConsumerID)))
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		cons, err := js.Consumer(ctx, spec.Names.Stream, spec.Names.Consumer)
		if err != nil {
			return err
		}
		o.line("ready")
		return natsjs.Consume(ctx, js, cons, handle, &natsjs.Options{Workers: spec.Workers, DeadLetterSubject: spec.Names.DLQSubject,
			Records: mg, Observe: observe, Logger: log})
	case BrokerAMQP:
		conn, err := amqp091.Dial(spec.URL)
		if err != nil {
			return err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		defer ch.Close()
		o.line("ready")
		return amqp.Consume(ctx, ch, spec.Names.Queue, handle, &amqp.Options{Workers: spec.Workers, Observe: observe, Logger: log})
	}
	return fmt.Errorf("unknown broker %q", spec.Broker)
}

// unguarded is SabotageUnguarded: the business in a transaction, acknowledged after the commit,
// with no record at all.
func unguarded(db *gorm.DB, business msgx.TxHandler) msgx.HandleFunc {
	return func(ctx context.Context, m *msgx.Message) msgx.Decision {
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return business(ctx, tx, m) })
		switch {
		case err == nil:
			return msgx.Decision{Action: msgx.Ack, Outcome: msgx.Processed}
		case idemkit.IsPermanent(err):
			return msgx.Decision{Action: msgx.DeadLetter, Outcome: msgx.Rejected, Err: err}
		default:
			return msgx.Decision{Action: msgx.Retry, Outcome: msgx.Failed, Delay: workerRetryDelay, Err: err}
		}
	}
}
