package msgx

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults of [Options].
const (
	DefaultRetryDelay    = time.Second
	DefaultMaxRetryDelay = time.Minute
)

// RejectAction says what happens to a message whose handler failed permanently.
type RejectAction uint8

// Reject actions.
const (
	// DeadLetterRejected dead-letters the message (the default): an operator finds it beside its
	// REJECTED record.
	DeadLetterRejected RejectAction = iota
	// AckRejected acknowledges it: the REJECTED record (with the error text) is the only trace.
	AckRejected
)

// Options configure a [Guard]. The zero value works: the message id is the key, the queue the scope,
// permanent failures are dead-lettered, retries back off from 1s to 1m, no attempt limit. New copies
// the struct; later changes to it have no effect.
type Options struct {
	// Scope is the record's scope for every message. Defaults to Message.Queue ("<stream>/<consumer>"
	// or the AMQP queue), so each consumer keeps its own records. Set it when the queue name is not
	// stable (an ephemeral JetStream consumer gets a new name each time, and with it a new scope: its
	// duplicates would run again), and when consumers whose queues have the same name share a record
	// table: the name holds no RabbitMQ virtual host, NATS account or JetStream domain, so a queue
	// "payments" on two vhosts has one scope, and a message of one answered as a Duplicate of the
	// other's message with the same id, never run.
	Scope string
	// Key returns a message's idempotency key. Defaults to Message.ID (ErrNoKey when empty). A key
	// derived from the payload (an order id) also deduplicates messages published twice with
	// different ids. An error, "", or a panic (a *PanicError) makes the message Poison:
	// dead-lettered, never run.
	Key func(m *Message) (string, error)
	// Fingerprint returns a hash of the payload; a key reused with another fingerprint is Poison
	// (idemkit.ErrPayloadMismatch). One no Store holds (longer than idemkit.MaxStoredLen bytes, or
	// not UTF-8: a raw binary hash) is stored as its hash (idemkit.StorableText). A panic (a
	// *PanicError) makes the message Poison. Defaults to none (see [DataFingerprint]).
	Fingerprint func(m *Message) string
	// OnReject says what to do with a message whose handler failed permanently. Defaults to
	// DeadLetterRejected.
	OnReject RejectAction
	// RetryDelay is the delay before the first redelivery after a retryable failure; it doubles with
	// every attempt up to MaxRetryDelay. Deliveries that find their key in flight wait the holder's
	// remaining lease, kept between RetryDelay and that delay (RetryDelay on a first attempt). Defaults
	// to DefaultRetryDelay (1s).
	RetryDelay time.Duration
	// MaxRetryDelay caps the delay. Defaults to DefaultMaxRetryDelay (1m), or to RetryDelay when
	// that is longer (every delay is then RetryDelay).
	MaxRetryDelay time.Duration
	// MaxAttempts dead-letters a message whose handler failed with a retryable error on this
	// delivery attempt or a later one (Outcome GaveUp) — in Tx mode also one whose transaction its
	// handler's ignored failed statement aborted, or a deferred constraint refused at COMMIT; never
	// one whose delivery's context ended while it ran (the consumer stopping: whatever error the
	// handler answered with, it was cut short), nor one whose outcome could not be recorded (store or
	// lock unavailable, a COMMIT that failed
	// otherwise — on a write conflict too, when no other delivery's record answers it), nor, in Tx
	// mode, one whose handler returned a write conflict the database ended its transaction on (a
	// deadlock victim, a serialization failure: record.IsConflict); those are retried. Attempts
	// are the broker's deliveries (Message.Attempt), those retried without giving up (and InFlight
	// ones) among them: a handler whose first failure comes after such deliveries, at MaxAttempts,
	// gives up at once. Defaults to 0: no limit here (the broker's
	// own limit still applies: msgx/natsjs dead-letters the last delivery before a consumer's
	// MaxDeliver — one whose process died during it from the server's advisory, see msgx/natsjs —, a
	// RabbitMQ quorum queue's x-delivery-limit dead-letters through its exchange). It needs
	// the broker's delivery count: on a queue without one (a RabbitMQ classic queue) only 0, 1 and
	// 2 work, and a larger value stops the consumer at the first redelivery (ErrMisconfigured).
	MaxAttempts int
	// Logger receives warnings (recovered panics, poison messages). Defaults to discarding.
	Logger *slog.Logger
}

func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	c.RetryDelay = cmp.Or(c.RetryDelay, DefaultRetryDelay)
	c.MaxRetryDelay = cmp.Or(c.MaxRetryDelay, max(DefaultMaxRetryDelay, c.RetryDelay))
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if c.RetryDelay < 0 {
		errs = append(errs, fmt.Errorf("RetryDelay must not be negative, got %s", c.RetryDelay))
	}
	if c.MaxRetryDelay < 0 {
		errs = append(errs, fmt.Errorf("MaxRetryDelay must not be negative, got %s", c.MaxRetryDelay))
	}
	if c.RetryDelay >= 0 && c.MaxRetryDelay >= 0 && c.MaxRetryDelay < c.RetryDelay {
		errs = append(errs, fmt.Errorf("MaxRetryDelay (%s) must not be shorter than RetryDelay (%s)", c.MaxRetryDelay, c.RetryDelay))
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("MaxAttempts must not be negative, got %d", c.MaxAttempts))
	}
	if c.OnReject > AckRejected {
		errs = append(errs, fmt.Errorf("unknown OnReject %d", c.OnReject))
	}
	if err := errors.Join(errs...); err != nil {
		return Options{}, fmt.Errorf("msgx: invalid options: %w", err)
	}
	return c, nil
}
