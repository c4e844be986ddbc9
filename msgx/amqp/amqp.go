package amqp

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idemkit/msgx"
)

// DefaultWorkers is the default of Options.Workers.
const DefaultWorkers = 1

// DefaultCancelTimeout is the default of Options.CancelTimeout.
const DefaultCancelTimeout = 2 * time.Second

// Options configure [Consume]. The zero value works: one worker, a prefetch of one, a generated
// consumer tag.
type Options struct {
	// Workers is how many deliveries are handled at once. Defaults to DefaultWorkers (1).
	Workers int
	// Prefetch is the channel's prefetch count (basic.qos): how many unacknowledged deliveries the
	// broker sends ahead. Deliveries waiting out a Retry delay count against it. Defaults to Workers.
	// On a classic queue, which requeues a message at its head, a message that keeps failing then
	// holds back every message behind it (see the package msgx doc, "Ordering and concurrency"):
	// prefer a quorum queue, or set msgx.Options.MaxAttempts.
	Prefetch int
	// ConsumerTag names the consumer. Defaults to "idemkit-" and random hex.
	ConsumerTag string
	// CancelTimeout bounds the wait, once Consume's context ends, for the broker to confirm the
	// consumer's cancellation (basic.cancel-ok). A broker that stopped answering (a frozen process, a
	// connection silently black-holed) would otherwise hold Consume until the client library gives the
	// connection up on its heartbeat deadline (15 s with amqp091's default heartbeat). After it,
	// Consume stops taking deliveries and returns ErrCancelUnconfirmed. Defaults to
	// DefaultCancelTimeout (2s); negative is an error.
	CancelTimeout time.Duration
	// Observe, when set, is called with every decision after the outcome is durable and before the
	// broker is told (metrics, tests). It runs on the worker and must be safe for concurrent use.
	Observe func(m *msgx.Message, d msgx.Decision)
	// Logger receives settlement failures and dead-lettered messages. Defaults to discarding.
	Logger *slog.Logger
}

// ErrChannelClosed: the channel or its connection closed while consuming. Open a new channel and
// call Consume again; unacknowledged deliveries were requeued by the broker. On a connection with
// amqp091's automatic recovery (Config.Recovery) too: the channel comes back with delivery tags counted
// anew, on which no delivery taken before could be settled (its tag may name another delivery), so
// Consume takes no delivery after the loss, settles none taken before and returns ErrChannelClosed
// once the running handlers returned. amqp091 reopens the channel with the consumer subscribed again,
// and what the broker sends that consumer no one takes: close the channel once it is open again (the
// broker requeues those deliveries), or close the connection — not the channel while its connection
// is down: amqp091's recovery of the connection then fails for good.
var ErrChannelClosed = errors.New("amqp: channel closed while consuming")

// ErrCancelUnconfirmed: Consume's context ended and the broker did not confirm the consumer's
// cancellation within Options.CancelTimeout, so Consume stopped waiting for it. Deliveries the broker
// had sent that no handler took are left unacknowledged, as is the acknowledgement of any delivery
// that may not have reached the broker: the broker requeues them all when the channel or its
// connection closes. A broker that stopped answering answers a channel's Close no more than the
// cancellation: end the connection with a deadline, [amqp091.Connection.CloseDeadline].
var ErrCancelUnconfirmed = errors.New("amqp: the broker did not confirm the consumer's cancellation")

// ErrConsumerCancelled: the broker cancelled the consumer while the channel stayed open (the queue
// was deleted, or, for a replicated queue, the node holding it went away). Unacknowledged deliveries
// were requeued by the broker, if the queue still exists; check the queue before consuming again.
var ErrConsumerCancelled = errors.New("amqp: the broker cancelled the consumer")

// Consume consumes queue on ch with manual acknowledgements and hands each delivery to h on
// Options.Workers goroutines, then settles it by h's decision: Ack; Retry — the delivery is held
// unacknowledged for the decision's delay (RabbitMQ has no delayed requeue) and then requeued with
// Nack (RabbitMQ closes the channel of a delivery left unacknowledged longer than its
// consumer_timeout, 30 minutes by default: keep msgx.Options.MaxRetryDelay, and the handler's longest
// run, below it, or Consume returns ErrChannelClosed and the broker requeues what was held); DeadLetter — Nack without requeue, so the queue's dead-letter exchange (x-dead-letter-exchange,
// see [Declare]) routes it. A queue without one drops it: declare one.
//
// It blocks until ctx is done or the channel closes. On ctx's end it cancels the consumer, requeues
// deliveries not yet handled and those waiting out a delay, waits for running handlers (their
// context is ctx) and returns nil. When the broker does not confirm the cancellation within
// Options.CancelTimeout (it stopped answering), Consume stops there: it takes no more deliveries,
// waits for running handlers, requeues those waiting out a delay and returns ErrCancelUnconfirmed
// — at most CancelTimeout after ctx's end beyond the running handlers' own time; the broker requeues
// what was left unacknowledged once the connection ends (the call that cancels the consumer returns
// then too). It returns an error wrapping ErrChannelClosed when the channel
// closed first (or its connection was lost, even one amqp091 recovers: see ErrChannelClosed), or ErrConsumerCancelled when the broker cancelled the consumer. A decision whose
// error wraps msgx.ErrMisconfigured (the queue cannot be the record's scope;
// msgx.Options.MaxAttempts above 2 on a classic queue, which keeps no delivery count — see the
// package doc) stops it the same way, the delivery requeued, and Consume returns that error. It
// returns an error at once for an empty queue name. It sets the channel's prefetch (basic.qos). ch
// must not be used by another consumer; close it after Consume returns, so that the broker requeues
// any delivery the client library had buffered when the consumer was cancelled (after
// ErrCancelUnconfirmed, close its connection with a deadline instead: see the package doc, "Stopping").
func Consume(ctx context.Context, ch *amqp091.Channel, queue string, h msgx.HandleFunc, opts *Options) error {
	if ch == nil || h == nil {
		return errors.New("amqp: nil channel or handler")
	}
	if queue == "" {
		// RabbitMQ would consume the channel's last declared queue, and "" is no record scope.
		return errors.New("amqp: Consume needs a queue name")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if err := ch.Qos(o.Prefetch, 0, false); err != nil {
		return fmt.Errorf("amqp: setting prefetch: %w", err)
	}
	// Told of a loss of the channel or its connection before the deliveries end: with amqp091's
	// automatic recovery (Config.Recovery) they do not end, and the channel comes back with the
	// consumer and delivery tags counted anew (see consumer.tell).
	closes := ch.NotifyClose(make(chan *amqp091.Error, 1))
	deliveries, err := ch.Consume(queue, o.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqp: consuming %s: %w", queue, err)
	}
	c := &consumer{queue: queue, opts: &o, flush: make(chan struct{}), closes: closes, lost: make(chan struct{})}
	watching := make(chan struct{})
	defer close(watching)
	go func() {
		select {
		case e, ok := <-closes:
			c.mu.Lock()
			c.markLost(e, ok)
			c.mu.Unlock()
		case <-watching:
		}
	}()
	// stopping ends when ctx does, or when a decision says the consumer is misconfigured.
	stopping, misconfigured := context.WithCancelCause(ctx)
	defer misconfigured(nil)
	cancelled := make(chan struct{})
	unconfirmed := make(chan struct{}) // closed when the broker did not confirm the cancellation in time
	stop := context.AfterFunc(stopping, func() {
		defer close(cancelled)
		// Cancel waits for the broker's cancel-ok, or for the channel to close: a broker that stopped
		// answering holds it until the connection is given up. It returns into answer, read or not.
		answer := make(chan error, 1)
		go func() { answer <- ch.Cancel(o.ConsumerTag, false) }()
		t := time.NewTimer(o.CancelTimeout)
		defer t.Stop()
		select {
		case err := <-answer:
			if err != nil {
				o.Logger.Warn("amqp: cancelling consumer", "queue", queue, "error", err)
			}
		case <-t.C:
			o.Logger.Warn("amqp: the broker did not confirm the consumer's cancellation; giving up on it",
				"queue", queue, "cancel_timeout", o.CancelTimeout)
			close(unconfirmed)
		}
	})

	var workers sync.WaitGroup
	for range o.Workers {
		workers.Go(func() {
			for {
				var d amqp091.Delivery
				var ok bool
				select {
				case d, ok = <-deliveries:
				case <-unconfirmed: // what is still buffered stays unacknowledged: requeued by the broker
				case <-c.lost: // requeued by the broker when the channel or its connection ended
				}
				if !ok || c.isLost() { // lost: what was taken since is the broker's again (see consumer.tell)
					return
				}
				if stopping.Err() != nil { // stopping: give it back at once
					c.nack(&d, true)
					continue
				}
				m := Message(&d, queue)
				dec := h(ctx, m)
				if o.Observe != nil {
					o.Observe(m, dec)
				}
				if errors.Is(dec.Err, msgx.ErrMisconfigured) {
					c.nack(&d, true)
					misconfigured(fmt.Errorf("amqp: consuming %s: %w", queue, dec.Err))
					continue
				}
				c.settle(&d, m, dec)
			}
		})
	}
	workers.Wait()
	close(c.flush) // requeue what waits out a delay now
	c.delayed.Wait()
	if lost := c.lostErr(); lost != nil {
		// Not closed here: recovered (amqp091's Config.Recovery), the channel may still be reopening,
		// and amqp091 neither reopens one closed while its connection is down (its recovery of the
		// connection then fails for good) nor orders a Close with the reopening's handshake.
		if !stop() {
			<-cancelled
		}
		return fmt.Errorf("%w (queue %s): %w", ErrChannelClosed, queue, lost)
	}
	if stop() { // the deliveries ended before ctx did
		if !ch.IsClosed() { // amqp091 marks a channel closed before it ends its consumers' deliveries
			return fmt.Errorf("%w (queue %s)", ErrConsumerCancelled, queue)
		}
		return fmt.Errorf("%w (queue %s)", ErrChannelClosed, queue)
	}
	<-cancelled
	if err := context.Cause(stopping); errors.Is(err, msgx.ErrMisconfigured) {
		return err
	}
	select {
	case <-unconfirmed:
		return fmt.Errorf("%w within %s (queue %s)", ErrCancelUnconfirmed, o.CancelTimeout, queue)
	default:
	}
	return nil
}

func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.Prefetch = cmp.Or(c.Prefetch, c.Workers)
	c.CancelTimeout = cmp.Or(c.CancelTimeout, DefaultCancelTimeout)
	if c.ConsumerTag == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.ConsumerTag = "idemkit-" + hex.EncodeToString(b[:])
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Workers < 1:
		return Options{}, fmt.Errorf("amqp: Workers must be positive, got %d", c.Workers)
	case c.Prefetch < 1: // set: a default is Workers, checked above
		return Options{}, fmt.Errorf("amqp: Prefetch must be positive, got %d", c.Prefetch)
	case c.CancelTimeout < 0:
		return Options{}, fmt.Errorf("amqp: CancelTimeout must not be negative, got %s", c.CancelTimeout)
	}
	return c, nil
}

// Message converts a delivery from queue to a msgx.Message: ID from the message-id property, Queue
// the queue, Subject the routing key, Attempt 1 for a delivery the broker does not flag as
// redelivered (whatever count headers the message was published with), else from the
// x-delivery-count and x-acquired-count headers (quorum queues; the larger), or 2 without them, with
// AttemptsUncounted (a classic queue keeps no count). On a redelivery, count headers a publisher put
// on the message stand where the broker sets none (on a classic queue, or an x-acquired-count before
// RabbitMQ 4): relays that republish deliveries must drop them. Header values are text as given:
// long strings, and byte arrays as their bytes; a void value (a null) is empty; values of other
// types are formatted with fmt.Sprint.
func Message(d *amqp091.Delivery, queue string) *msgx.Message {
	m := &msgx.Message{
		ID:          d.MessageId,
		Queue:       queue,
		Subject:     d.RoutingKey,
		Data:        d.Body,
		Attempt:     1,
		Redelivered: d.Redelivered,
		Raw:         d,
	}
	if len(d.Headers) > 0 {
		m.Header = make(msgx.Header, len(d.Headers))
		for k, v := range d.Headers {
			switch v := v.(type) {
			case string:
				m.Header[k] = []string{v}
			case []byte: // a byte array ('x'): pika's bytes, the Java client's byte[]
				m.Header[k] = []string{string(v)}
			case nil: // void ('V'): pika's None, the Java client's null; not the text "<nil>"
				m.Header[k] = []string{""}
			default:
				m.Header[k] = []string{fmt.Sprint(v)}
			}
		}
	}
	if !d.Redelivered {
		// The broker delivered it never before: count headers on it came with the message as
		// published (a relay forwarding a redelivery with its headers), and counted nothing here.
		return m
	}
	// Quorum queues count earlier deliveries in x-delivery-count; from RabbitMQ 4.3 that counts only
	// failed ones (basic.reject, not a basic.nack requeue or a consumer that died), and
	// x-acquired-count counts them all.
	dc, ok1 := count(d.Headers["x-delivery-count"])
	ac, ok2 := count(d.Headers["x-acquired-count"])
	if ok1 || ok2 {
		m.Attempt = max(dc, ac) + 1
	} else { // a queue that keeps no count (classic): at least the second delivery
		m.Attempt = 2
		m.AttemptsUncounted = true
	}
	return m
}

// count reads a delivery-count header's value.
func count(v any) (int, bool) {
	switch n := v.(type) {
	case int64:
		return int(n), true
	case int32:
		return int(n), true
	case int:
		return n, true
	}
	return 0, false
}

type consumer struct {
	queue   string
	opts    *Options
	flush   chan struct{} // closed when consuming stops: delayed requeues happen at once
	delayed sync.WaitGroup

	closes <-chan *amqp091.Error // the channel's NotifyClose
	lost   chan struct{}         // closed once the channel or its connection was lost

	mu       sync.Mutex // guards gone and orders each settlement with the check of closes
	gone     bool
	goneWith *amqp091.Error
}

// markLost notes the channel's loss (e, ok received from closes), under c.mu.
func (c *consumer) markLost(e *amqp091.Error, ok bool) {
	if c.gone {
		return
	}
	c.gone, c.goneWith = true, e
	if !ok || e == nil {
		c.goneWith = nil // closed on purpose: not a loss to report
	}
	close(c.lost)
}

// lostErr is the error the channel or its connection was lost with, or nil.
func (c *consumer) lostErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.goneWith == nil {
		return nil
	}
	return c.goneWith
}

// tell settles a delivery with f (its ack or nack) unless the channel it came on was lost since: the
// broker requeued the delivery then, and its tag means nothing more — on a channel amqp091 recovered
// (Config.Recovery), delivery tags count from 1 again, so the tag may name another delivery, whose
// handler has not run or not finished. The loss is checked here itself, not only by the goroutine
// that watches for it: amqp091 reports it before it reopens the channel.
func (c *consumer) tell(f func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lostLocked() {
		return errLost
	}
	return f()
}

// isLost reports whether the channel or its connection was lost: a delivery taken now may be one the
// broker requeued then, or one on the recovered channel, which Consume no longer handles.
func (c *consumer) isLost() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lostLocked()
}

// lostLocked is isLost, under c.mu.
func (c *consumer) lostLocked() bool {
	if !c.gone {
		select {
		case e, ok := <-c.closes:
			c.markLost(e, ok)
		default:
		}
	}
	return c.gone
}

// errLost: a delivery not settled because its channel was lost meanwhile (see consumer.tell).
var errLost = errors.New("the channel or its connection was lost since the delivery: the broker requeued it")

// settle tells the broker what became of d. A failed ack only costs a redelivery (the broker requeues
// unacknowledged deliveries when the channel closes), which the guard answers from the record.
func (c *consumer) settle(d *amqp091.Delivery, m *msgx.Message, dec msgx.Decision) {
	var err error
	switch dec.Action {
	case msgx.Ack:
		err = c.tell(func() error { return d.Ack(false) })
	case msgx.Retry:
		if dec.Delay <= 0 {
			c.nack(d, true)
			return
		}
		c.delayed.Go(func() {
			t := time.NewTimer(dec.Delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-c.flush:
			}
			c.nack(d, true)
		})
		return
	case msgx.DeadLetter:
		c.opts.Logger.Warn("amqp: dead-lettering message", "queue", c.queue, "routing_key", m.Subject,
			"outcome", dec.Outcome.String(), "error", dec.Err)
		err = c.tell(func() error { return d.Nack(false, false) })
	default:
		c.nack(d, true)
		err = fmt.Errorf("unknown action %v", dec.Action)
	}
	if err != nil {
		c.opts.Logger.Warn("amqp: settling delivery", "queue", c.queue, "action", dec.Action.String(), "error", err)
	}
}

func (c *consumer) nack(d *amqp091.Delivery, requeue bool) {
	if err := c.tell(func() error { return d.Nack(false, requeue) }); err != nil {
		c.opts.Logger.Warn("amqp: requeueing delivery", "queue", c.queue, "error", err)
	}
}
