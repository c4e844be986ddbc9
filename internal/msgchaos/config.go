//go:build unix

package msgchaos

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// Brokers the harness runs against.
const (
	BrokerNATS = "nats" // NATS JetStream, msgx/natsjs
	BrokerAMQP = "amqp" // RabbitMQ, msgx/amqp
)

// Defaults of [Config]: the bounded run of the test suite.
const (
	DefaultMessages    = 300
	DefaultDupRate     = 0.30
	DefaultConsumers   = 3
	DefaultWorkers     = 4
	DefaultKills       = 3
	DefaultRejectEvery = 23
	DefaultFlakyEvery  = 11
	DefaultPoison      = 3
	DefaultBatches     = 10
	DefaultBatchGap    = 300 * time.Millisecond
	DefaultLease       = 2 * time.Second
	DefaultSettle      = 2 * time.Minute
)

// KillMode is where in a message's life a consumer process is SIGKILLed.
type KillMode string

// Kill modes, used in turn.
const (
	// KillInside kills a consumer inside a handler, after its writes and before the commit: the
	// database rolls the transaction back and the broker redelivers the message.
	KillInside KillMode = "inside"
	// KillCommitted kills a consumer after the commit and before the ack: the redelivery must be
	// acknowledged as a duplicate without a second effect.
	KillCommitted KillMode = "committed"
	// KillRandom kills a consumer at a random moment of its work.
	KillRandom KillMode = "random"
	// KillLast kills a consumer as KillInside does, on a message's last delivery (Config.NATSMaxDeliver):
	// the server delivers the message no more and publishes a MAX_DELIVERIES advisory, from which a
	// running consumer settles it as its record says (no record: dead-lettered GaveUp). Only with
	// NATSMaxDeliver.
	KillLast KillMode = "last"
)

// Sabotage breaks the consumer on purpose, to prove the checker catches what it should.
type Sabotage string

const (
	// SabotageNone runs msgx as shipped.
	SabotageNone Sabotage = ""
	// SabotageUnguarded runs the handler without msgx's guard (a transaction, then an ack): every
	// duplicate and redelivery takes effect again.
	SabotageUnguarded Sabotage = "unguarded"
	// SabotageAckFirst acknowledges each message before its handler runs: a consumer killed inside
	// a handler loses the message.
	SabotageAckFirst Sabotage = "ack-first"
)

// Config configures [Run]. The zero value works: NATS, the bounded figures above.
type Config struct {
	// Broker is BrokerNATS or BrokerAMQP. Defaults to BrokerNATS.
	Broker string
	// Messages is the number of distinct messages (ids) published. Defaults to DefaultMessages.
	Messages int
	// DupRate is the share of ids published more than once (twice, a third of those three times).
	// Defaults to DefaultDupRate (30%); negative for none.
	DupRate float64
	// Consumers is the number of consumer processes, Workers the messages each handles at once.
	// Default to DefaultConsumers (3) and DefaultWorkers (4).
	Consumers, Workers int
	// Kills is the number of consumer processes SIGKILLed (and replaced) during the run, spread over
	// it, cycling through the kill modes. Defaults to DefaultKills (3); negative for none.
	Kills int
	// RejectEvery makes every n-th id fail permanently (REJECTED, dead-lettered). FlakyEvery makes
	// every n-th id fail with a retryable error on its first attempt. Poison messages have no id.
	// Default to DefaultRejectEvery, DefaultFlakyEvery, DefaultPoison; negative disables.
	RejectEvery, FlakyEvery, Poison int
	// Messages are published in Batches batches, BatchGap apart; each batch also republishes the
	// duplicate copies of the batch before it (after JetStream's shortest duplicate window, 100ms).
	Batches  int
	BatchGap time.Duration
	// Lease is the consumers' idemkit Options.Lease (and lock TTL): how long a killed consumer's
	// claim or lock delays the redelivery. Defaults to DefaultLease (2s).
	Lease time.Duration
	// Settle bounds the wait for every message to be settled after publishing. Defaults to
	// DefaultSettle (2m).
	Settle time.Duration
	// MySQLDSN is the server DSN with the database (tables are created and dropped there). Defaults
	// to the test database of internal/testsvc. RedisAddr, NATSURL, AMQPURL likewise.
	MySQLDSN, RedisAddr, NATSURL, AMQPURL string
	// NATSMaxDeliver, when positive, is the JetStream consumer's MaxDeliver (NATS only; ignored on
	// RabbitMQ): half the kills then land inside a handler on a message's last delivery (KillLast),
	// which the consumers settle from the server's MAX_DELIVERIES advisory (natsjs.Options.Records is
	// the msgx.Guard). A message may then end with no effect and a GaveUp dead letter instead of one
	// effect. Defaults to 0: MaxDeliver unlimited.
	NATSMaxDeliver int
	// Sabotage breaks the consumer on purpose (tests of the checker). Defaults to SabotageNone.
	Sabotage Sabotage
	// Seed seeds the publishing order and the kill schedule. Defaults to the clock.
	Seed int64
	// Keep keeps the tables, stream and queues after the run.
	Keep bool
	// Logf receives progress lines. Defaults to discarding.
	Logf func(format string, args ...any)
	// WorkerCommand is the executable started as a consumer process; it must call
	// [RunWorkerIfRequested] first thing. Defaults to this process's executable.
	WorkerCommand string
}

func (c *Config) withDefaults() (Config, error) {
	var o Config
	if c != nil {
		o = *c
	}
	o.Broker = cmp.Or(o.Broker, BrokerNATS)
	o.Messages = cmp.Or(o.Messages, DefaultMessages)
	if o.DupRate == 0 {
		o.DupRate = DefaultDupRate
	}
	o.DupRate = max(o.DupRate, 0)
	o.Consumers = cmp.Or(o.Consumers, DefaultConsumers)
	o.Workers = cmp.Or(o.Workers, DefaultWorkers)
	o.Kills = max(cmp.Or(o.Kills, DefaultKills), 0)
	o.RejectEvery = max(cmp.Or(o.RejectEvery, DefaultRejectEvery), 0)
	o.FlakyEvery = max(cmp.Or(o.FlakyEvery, DefaultFlakyEvery), 0)
	o.Poison = max(cmp.Or(o.Poison, DefaultPoison), 0)
	o.Batches = cmp.Or(o.Batches, DefaultBatches)
	o.BatchGap = cmp.Or(o.BatchGap, DefaultBatchGap)
	o.Lease = cmp.Or(o.Lease, DefaultLease)
	o.Settle = cmp.Or(o.Settle, DefaultSettle)
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano()
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	var errs []error
	if o.Broker != BrokerNATS && o.Broker != BrokerAMQP {
		errs = append(errs, fmt.Errorf("unknown Broker %q (want %s or %s)", o.Broker, BrokerNATS, BrokerAMQP))
	}
	if o.Messages < 1 || o.Consumers < 1 || o.Workers < 1 || o.Batches < 1 {
		errs = append(errs, errors.New("Messages, Consumers, Workers and Batches must be positive"))
	}
	if o.DupRate > 1 {
		errs = append(errs, fmt.Errorf("DupRate must be at most 1, got %g", o.DupRate))
	}
	if o.BatchGap < 150*time.Millisecond {
		errs = append(errs, fmt.Errorf("BatchGap must be at least 150ms (past JetStream's shortest duplicate window), got %s", o.BatchGap))
	}
	if o.Lease < 100*time.Millisecond || o.Settle < time.Second {
		errs = append(errs, errors.New("Lease must be at least 100ms and Settle at least 1s"))
	}
	if o.NATSMaxDeliver < 0 {
		errs = append(errs, fmt.Errorf("NATSMaxDeliver must not be negative, got %d", o.NATSMaxDeliver))
	}
	if o.Broker != BrokerNATS {
		o.NATSMaxDeliver = 0
	}
	if o.Sabotage != SabotageNone && o.Sabotage != SabotageUnguarded && o.Sabotage != SabotageAckFirst {
		errs = append(errs, fmt.Errorf("unknown Sabotage %q", o.Sabotage))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("msgchaos: invalid config: %w", err)
	}
	return o, nil
}
