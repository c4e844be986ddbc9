//go:build unix

package msgchaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/amqp"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// Names of the broker resources of a run.
type brokerNames struct {
	Stream, Consumer, DLQStream, DLQSubject string // NATS
	Queue                                   string // AMQP (its dead-letter exchange and queue follow)
}

// deadLetter is a message found in the dead-letter stream or queue.
type deadLetter struct {
	ID      string
	Poison  int
	Outcome string // the msgx outcome it says it was dead-lettered with (NATS; "" on RabbitMQ)
}

// broker is the harness's side of a broker: it creates and deletes the run's resources, publishes
// and inspects.
type broker interface {
	// publish publishes one copy; deduped reports that the broker dropped it (JetStream's window).
	publish(ctx context.Context, id string, payload []byte) (deduped bool, err error)
	// pending is how many messages the broker still holds for the consumers (NATS: undelivered plus
	// unacknowledged; AMQP: ready, as unacknowledged ones are invisible to a passive declare).
	pending(ctx context.Context) (int, error)
	deadLetters(ctx context.Context) ([]deadLetter, error)
	cleanup(ctx context.Context) error
	close()
}

// --- NATS ---

type natsBroker struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names brokerNames
	cons  jetstream.Consumer
	dlq   jetstream.Stream
}

func newNATS(ctx context.Context, url string, names brokerNames, ackWait time.Duration, maxDeliver int) (*natsBroker, error) {
	nc, err := nats.Connect(url, nats.Timeout(3*time.Second), nats.Name("idemkit-msgchaos"))
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w", url, err)
	}
	b := &natsBroker{nc: nc, names: names}
	if b.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, err
	}
	// The shortest duplicate window JetStream allows, so that the later copies of an id reach the
	// consumers; with the default two minutes JetStream would drop them all itself.
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: names.Stream, Subjects: []string{names.Stream + ".msgs"},
		Duplicates: 100 * time.Millisecond, Storage: jetstream.FileStorage}); err != nil {
		b.close()
		return nil, fmt.Errorf("creating stream %s: %w", names.Stream, err)
	}
	if b.dlq, err = b.js.CreateStream(ctx, jetstream.StreamConfig{Name: names.DLQStream, Subjects: []string{names.DLQSubject}}); err != nil {
		b.cleanup(ctx)
		b.close()
		return nil, fmt.Errorf("creating stream %s: %w", names.DLQStream, err)
	}
	if b.cons, err = b.js.CreateOrUpdateConsumer(ctx, names.Stream, natsConsumerConfig(names, ackWait, maxDeliver)); err != nil {
		b.cleanup(ctx)
		b.close()
		return nil, fmt.Errorf("creating consumer: %w", err)
	}
	return b, nil
}

// natsConsumerConfig is the run's durable consumer; maxDeliver 0 is unlimited.
func natsConsumerConfig(names brokerNames, ackWait time.Duration, maxDeliver int) jetstream.ConsumerConfig {
	c := jetstream.ConsumerConfig{Durable: names.Consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxAckPending: 1000}
	if maxDeliver > 0 {
		c.MaxDeliver = maxDeliver
	}
	return c
}

func (b *natsBroker) publish(ctx context.Context, id string, payload []byte) (bool, error) {
	m := nats.NewMsg(b.names.Stream + ".msgs")
	m.Data = payload
	var opts []jetstream.PublishOpt
	if id != "" {
		opts = append(opts, jetstream.WithMsgID(id))
	}
	ack, err := b.js.PublishMsg(ctx, m, opts...)
	if err != nil {
		return false, err
	}
	return ack.Duplicate, nil
}

func (b *natsBroker) pending(ctx context.Context) (int, error) {
	info, err := b.cons.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.NumPending) + info.NumAckPending, nil
}

func (b *natsBroker) deadLetters(ctx context.Context) ([]deadLetter, error) {
	info, err := b.dlq.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []deadLetter
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		raw, err := b.dlq.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		// The copy has a Nats-Msg-Id of its own (one per dead-lettering); the original's is kept
		// under natsjs.HeaderOriginalPrefix.
		id := raw.Header.Get(natsjs.HeaderOriginalPrefix + "Msg-Id")
		out = append(out, parseDeadLetter(id, raw.Data, raw.Header.Get(natsjs.HeaderOutcome)))
	}
	return out, nil
}

// parseDeadLetter identifies a dead letter: a poison message by its body (it may have no id of its
// own, or one the adapter gave it, "<stream>/<consumer>:<seq>"), others by their id.
func parseDeadLetter(id string, payload []byte, outcome string) deadLetter {
	var bd body
	_ = json.Unmarshal(payload, &bd)
	if bd.Kind == kindPoison {
		return deadLetter{Poison: bd.Poison, Outcome: outcome}
	}
	if outcome == msgx.Poison.String() && strings.Contains(id, ":") {
		id = ""
	}
	return deadLetter{ID: id, Poison: bd.Poison, Outcome: outcome}
}

func (b *natsBroker) cleanup(ctx context.Context) error {
	var errs []error
	for _, s := range []string{b.names.Stream, b.names.DLQStream} {
		if err := b.js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("deleting stream %s: %w", s, err))
		}
	}
	return errors.Join(errs...)
}

func (b *natsBroker) close() { b.nc.Close() }

// --- RabbitMQ ---

type amqpBroker struct {
	conn *amqp091.Connection
	pub  *amqp091.Channel
	topo amqp.Topology
}

func newAMQP(url string, names brokerNames) (*amqpBroker, error) {
	conn, err := amqp091.DialConfig(url, amqp091.Config{Dial: amqp091.DefaultDial(3 * time.Second), Properties: amqp091.Table{"connection_name": "idemkit-msgchaos"}})
	if err != nil {
		return nil, fmt.Errorf("connecting to RabbitMQ at %s: %w", url, err)
	}
	b := &amqpBroker{conn: conn}
	if b.pub, err = conn.Channel(); err != nil {
		conn.Close()
		return nil, err
	}
	if b.topo, err = amqp.Declare(b.pub, names.Queue, nil); err != nil {
		conn.Close()
		return nil, err
	}
	if err := b.pub.Confirm(false); err != nil {
		b.cleanup(context.Background())
		conn.Close()
		return nil, err
	}
	return b, nil
}

func (b *amqpBroker) publish(ctx context.Context, id string, payload []byte) (bool, error) {
	dc, err := b.pub.PublishWithDeferredConfirmWithContext(ctx, "", b.topo.Queue, false, false,
		amqp091.Publishing{MessageId: id, DeliveryMode: amqp091.Persistent, Body: payload})
	if err != nil {
		return false, err
	}
	ok, err := dc.WaitContext(ctx)
	if err == nil && !ok {
		err = errors.New("publish nacked by the broker")
	}
	return false, err
}

func (b *amqpBroker) pending(context.Context) (int, error) {
	q, err := b.pub.QueueDeclarePassive(b.topo.Queue, true, false, false, false, nil)
	return q.Messages, err
}

func (b *amqpBroker) deadLetters(context.Context) ([]deadLetter, error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	var out []deadLetter
	for {
		d, ok, err := ch.Get(b.topo.DeadLetterQueue, false)
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil // the unacknowledged gets go back to the queue when ch closes
		}
		out = append(out, parseDeadLetter(d.MessageId, d.Body, ""))
	}
}

func (b *amqpBroker) cleanup(context.Context) error {
	ch, err := b.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	return b.topo.Delete(ch)
}

func (b *amqpBroker) close() { b.conn.Close() }
