package msgx

import (
	"context"

	"gorm.io/gorm"
)

// Message is a delivered message as the broker adapters (msgx/natsjs, msgx/amqp) hand it to a
// [HandleFunc]. Handlers must not modify it.
type Message struct {
	// ID is the publisher's message id: the Nats-Msg-Id header on NATS, the message-id property on
	// AMQP. It is the default idempotency key; "" when the publisher set none.
	ID string
	// Queue is where the message was consumed from: "<stream>/<consumer>" on NATS JetStream, the
	// queue name on AMQP. It is the default scope of the record.
	Queue string
	// Subject is the NATS subject or the AMQP routing key the message was published with.
	Subject string
	// Header holds the message's headers (AMQP header values converted to text: a byte array as its
	// bytes, a void value (null) as "", a number or a table formatted).
	Header Header
	// Data is the payload.
	Data []byte
	// Attempt counts deliveries of this message, from 1: the broker's delivery count where it keeps
	// one (JetStream; x-delivery-count on RabbitMQ quorum queues), else 2 for a message the broker
	// flags as redelivered and 1 otherwise.
	Attempt int
	// AttemptsUncounted is set by the adapter on a redelivery whose broker keeps no delivery count
	// (a RabbitMQ classic queue): Attempt is 2 however many deliveries there were. The Guard then
	// retries after Options.MaxRetryDelay (the backoff cannot grow) and, when Options.MaxAttempts is
	// above 2 (which it could never reach), does not handle the message: the decision's error wraps
	// ErrMisconfigured and the adapter stops consuming.
	AttemptsUncounted bool
	// Redelivered is the broker's redelivery flag (AMQP) or Attempt > 1 (JetStream). A duplicate
	// published twice is not redelivered: never skip the guard because this is false.
	Redelivered bool
	// Raw is the broker's own message (jetstream.Msg, amqp091.Delivery), for handlers that need more.
	// Handlers must not acknowledge it: the adapter does, after the outcome is durable.
	Raw any
}

// Header is a message's headers. Names are kept as the broker delivered them.
type Header map[string][]string

// Get returns the first value of name, or "". The lookup is exact (case-sensitive), as NATS headers are.
func (h Header) Get(name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// HandleFunc handles one delivery and says what to tell the broker. [Guard.Execute] and [Guard.Tx]
// build one from a handler; the adapters call it for every delivery and settle the message by the
// [Decision]. A HandleFunc must be safe for concurrent use.
type HandleFunc func(ctx context.Context, m *Message) Decision

// Handler is a message handler run in Execute mode (see [Guard.Execute]). Return nil when the
// message took effect, an error made with idemkit.Permanent (or classified permanent by the Guard)
// when it never can, and any other error to have it redelivered.
type Handler func(ctx context.Context, m *Message) error

// TxHandler is a message handler run in Tx mode (see [Guard.Tx]): every write it makes through tx
// commits together with the message's record, or not at all. It must not commit or roll back tx.
// Errors are classified as for [Handler].
type TxHandler func(ctx context.Context, tx *gorm.DB, m *Message) error
