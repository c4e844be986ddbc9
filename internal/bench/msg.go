package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/amqp"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// Names of the message-consumer variants (optional: they need NATS and RabbitMQ; run them with
// -variants).
const (
	VNATSBare    = "nats-bare"
	VNATSGuarded = "nats-guarded"
	VAMQPBare    = "amqp-bare"
	VAMQPGuarded = "amqp-guarded"
)

// msgWorkers is how many messages each variant's consumer handles at once: above the highest
// concurrency level, so the consumer is never the queue's bottleneck by its own configuration.
const msgWorkers = 64

// msgWait bounds the wait for a published message to be handled.
const msgWait = 30 * time.Second

// pipeline is one message variant's broker resources and running consumer. An Op publishes a
// message whose id is the request's key and returns when the consumer has handled it (its outcome
// durable, just before the ack), so a request is one message through the broker and the consumer.
type pipeline struct {
	mu      sync.Mutex
	waiters map[string]chan msgx.Decision
	publish func(ctx context.Context, id string) error
}

func newPipeline() *pipeline { return &pipeline{waiters: map[string]chan msgx.Decision{}} }

func (p *pipeline) observe(m *msgx.Message, d msgx.Decision) {
	p.mu.Lock()
	ch := p.waiters[m.ID]
	delete(p.waiters, m.ID)
	p.mu.Unlock()
	if ch != nil {
		ch <- d
	}
}

func (p *pipeline) op(ctx context.Context, w *Worker) error {
	key := w.Key()
	ch := make(chan msgx.Decision, 1)
	p.mu.Lock()
	p.waiters[key] = ch
	p.mu.Unlock()
	if err := p.publish(ctx, key); err != nil {
		p.mu.Lock()
		delete(p.waiters, key)
		p.mu.Unlock()
		return err
	}
	select {
	case d := <-ch:
		if d.Outcome != msgx.Processed {
			return fmt.Errorf("message %s: %v", key, d)
		}
		return nil
	case <-time.After(msgWait):
		return fmt.Errorf("message %s not handled within %s", key, msgWait)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// msgVariants are the four message-consumer variants: the same business INSERT in its own
// transaction (bare) or in msgx's Tx mode on guard (guarded), behind a NATS JetStream pull consumer
// (file storage) or a RabbitMQ durable queue (persistent messages). Nothing connects to a broker
// until a variant is set up.
func msgVariants(e *Env, guard *idemkit.Guard) ([]*Variant, error) {
	mg, err := msgx.New(guard, nil)
	if err != nil {
		return nil, err
	}
	amount := int64(1)
	bare := func(ctx context.Context, m *msgx.Message) msgx.Decision {
		err := e.Gorm.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return tx.Exec(e.InsertBiz, m.ID, amount).Error })
		if err != nil {
			return msgx.Decision{Action: msgx.Retry, Outcome: msgx.Failed, Delay: time.Second, Err: err}
		}
		return msgx.Decision{Action: msgx.Ack, Outcome: msgx.Processed}
	}
	guarded := mg.Tx(e.Gorm, e.Store, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
		return tx.Exec(e.InsertBiz, m.ID, amount).Error
	})
	vs := []*Variant{
		msgVariant(e, VNATSBare, "NATS JetStream: publish (Nats-Msg-Id), pull consumer runs the business transaction, ack", startNATS, bare),
		msgVariant(e, VNATSGuarded, "the same with the handler in msgx Tx mode (Guard.Tx: the record written once in the handler's transaction, Redis Locker)", startNATS, guarded),
		msgVariant(e, VAMQPBare, "RabbitMQ: publish (message-id, persistent), consumer runs the business transaction, manual ack", startAMQP, bare),
		msgVariant(e, VAMQPGuarded, "the same with the handler in msgx Tx mode (Guard.Tx: the record written once in the handler's transaction, Redis Locker)", startAMQP, guarded),
	}
	return vs, nil
}

type startFunc func(ctx context.Context, e *Env, p *pipeline, name string, h msgx.HandleFunc) error

func msgVariant(e *Env, name, what string, start startFunc, h msgx.HandleFunc) *Variant {
	p := newPipeline()
	return &Variant{Name: name, Group: "msg", What: what, Op: p.op,
		Setup: func(ctx context.Context) error { return start(ctx, e, p, e.Run+"_"+name, h) }}
}

// consumeInBackground runs consume on a context Env.Close cancels, and waits for it there.
func consumeInBackground(e *Env, consume func(ctx context.Context) error, cleanup func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- consume(ctx) }()
	e.closers = append(e.closers, func() error {
		cancel()
		return errors.Join(<-done, cleanup())
	})
}

func startNATS(ctx context.Context, e *Env, p *pipeline, name string, h msgx.HandleFunc) error {
	url := testsvc.Env("IDEMKIT_TEST_NATS", "nats://127.0.0.1:4222")
	nc, err := nats.Connect(url, nats.Name("idembench"))
	if err != nil {
		return fmt.Errorf("NATS at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return err
	}
	stream := name
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".msgs"}, Storage: jetstream.FileStorage}); err != nil {
		nc.Close()
		return fmt.Errorf("creating stream %s: %w", stream, err)
	}
	cleanup := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := js.DeleteStream(ctx, stream)
		nc.Close()
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "bench", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Minute, MaxAckPending: 4 * msgWorkers})
	if err != nil {
		return errors.Join(err, cleanup())
	}
	p.publish = func(ctx context.Context, id string) error {
		m := nats.NewMsg(stream + ".msgs")
		m.Data = result
		_, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(id))
		return err
	}
	consumeInBackground(e, func(ctx context.Context) error {
		return natsjs.Consume(ctx, js, cons, h, &natsjs.Options{Workers: msgWorkers, Observe: p.observe})
	}, cleanup)
	return nil
}

func startAMQP(ctx context.Context, e *Env, p *pipeline, name string, h msgx.HandleFunc) error {
	url := testsvc.Env("IDEMKIT_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/")
	conn, err := amqp091.Dial(url)
	if err != nil {
		return fmt.Errorf("RabbitMQ at %s: %w", url, err)
	}
	pub, err := conn.Channel()
	if err != nil {
		conn.Close()
		return err
	}
	topo, err := amqp.Declare(pub, name, nil)
	if err != nil {
		conn.Close()
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return err
	}
	cleanup := func() error {
		_ = ch.Close()
		err := topo.Delete(pub)
		conn.Close()
		return err
	}
	p.publish = func(ctx context.Context, id string) error {
		return pub.PublishWithContext(ctx, "", topo.Queue, false, false,
			amqp091.Publishing{MessageId: id, DeliveryMode: amqp091.Persistent, Body: result})
	}
	consumeInBackground(e, func(ctx context.Context) error {
		return amqp.Consume(ctx, ch, topo.Queue, h, &amqp.Options{Workers: msgWorkers, Observe: p.observe})
	}, cleanup)
	return nil
}
