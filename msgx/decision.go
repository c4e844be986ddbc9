package msgx

import (
	"fmt"
	"time"
)

// Action is what an adapter does with a delivery once its outcome is durable.
type Action uint8

// Actions.
const (
	// Ack acknowledges the message: it took effect (or had already), or its rejection is recorded and
	// Options.OnReject says to acknowledge.
	Ack Action = iota + 1
	// Retry asks the broker to deliver the message again after Decision.Delay: JetStream's
	// NakWithDelay; on RabbitMQ, which has no delayed negative acknowledgement, the adapter holds the
	// message unacknowledged for the delay and then requeues it.
	Retry
	// DeadLetter takes the message out of the queue for good and keeps it where an operator finds it:
	// JetStream publishes it to the configured dead-letter subject and terminates it; RabbitMQ rejects
	// it without requeueing, so the queue's dead-letter exchange routes it.
	DeadLetter
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead-letter"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Outcome is what happened to a delivery.
type Outcome uint8

// Outcomes.
const (
	// Processed: the handler ran and succeeded; the record is SUCCEEDED. Ack.
	Processed Outcome = iota + 1
	// Duplicate: the key had already succeeded; the handler did not run. Ack.
	Duplicate
	// Rejected: the handler failed permanently (now or on an earlier delivery); the record is
	// REJECTED. Dead-lettered, or acknowledged with Options.OnReject = AckRejected.
	Rejected
	// InFlight: another delivery of the same key holds it right now. Retry after a delay.
	InFlight
	// Failed: the handler failed with a retryable error, or the outcome could not be recorded (store
	// or lock unavailable, claim taken over, cancelled). Nothing is recorded as done. Retry.
	Failed
	// GaveUp: Failed, on an attempt at or past Options.MaxAttempts, or (msgx/natsjs) Failed or
	// InFlight on the consumer's last delivery (MaxDeliver), which the server would drop, or fetched
	// on it and not handled when Consume stopped (the handler did not run), or dropped by the server
	// there, unsettled past AckWait (its consumer process died), and not finished by its record.
	// Dead-lettered; the record is not REJECTED, so a redelivery from the dead-letter queue runs again.
	GaveUp
	// Poison: the message cannot be guarded at all: no usable key (ErrNoKey, idemkit.ErrInvalidKey)
	// or its key was already used with another payload (idemkit.ErrPayloadMismatch), or
	// Options.Key or Options.Fingerprint panicked on it (*PanicError). The handler did not run.
	// Dead-lettered, whatever Options.OnReject says.
	Poison
)

func (o Outcome) String() string {
	switch o {
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	case Rejected:
		return "rejected"
	case InFlight:
		return "in-flight"
	case Failed:
		return "failed"
	case GaveUp:
		return "gave-up"
	case Poison:
		return "poison"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Decision is a [HandleFunc]'s answer: what to tell the broker and why.
type Decision struct {
	Action  Action
	Outcome Outcome
	// Delay is how long to wait before redelivery: for Retry, and for DeadLetter, which the adapter
	// redelivers when it could not dead-letter the message (the attempt's backoff, as for a retry; a
	// GaveUp message then runs the handler again, a Rejected or Poison one is dead-lettered again).
	Delay time.Duration
	// Replayed is true when the handler did not run because the record was finished before
	// (Duplicate, or a Rejected replayed from the record).
	Replayed bool
	// Err is the handler's or the guard's error (nil for Processed and Duplicate).
	Err error
}

func (d Decision) String() string {
	s := d.Action.String() + " (" + d.Outcome.String()
	if d.Action == Retry {
		s += " after " + d.Delay.String()
	}
	if d.Err != nil {
		s += ": " + d.Err.Error()
	}
	return s + ")"
}
