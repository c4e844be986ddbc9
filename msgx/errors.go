package msgx

import (
	"errors"
	"fmt"
)

// ErrNoKey: the message has no idempotency key (no message id, or Options.Key returned ""). Such a
// message is dead-lettered without running: it could not be deduplicated.
var ErrNoKey = errors.New("msgx: message has no idempotency key")

// ErrMisconfigured: a delivery showed that the consumer is misconfigured, so that every message
// would fail the same way — its queue cannot be the record's scope (empty, or longer than the
// idemkit Guard's Options.MaxKeyLen: set Options.Scope), or Options.MaxAttempts is above 2 on a
// queue that keeps no delivery count (a RabbitMQ classic queue). The message is not run and not
// dead-lettered: the Decision is Retry (after Options.MaxRetryDelay, outcome Failed) with an error
// wrapping ErrMisconfigured, and the adapters (msgx/natsjs, msgx/amqp) give the message back and stop
// consuming with that error. Options.Scope is checked by New already.
var ErrMisconfigured = errors.New("msgx: consumer misconfigured")

// PanicError is a handler's panic, recovered and treated as a retryable failure whatever the Guard's
// Options.IsPermanent says (it comes marked idemkit.Retryable; the message is
// redelivered, and dead-lettered once Options.MaxAttempts is reached). A panic of Options.Key or
// Options.Fingerprint is one too: the message cannot be guarded, it is Poison.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the goroutine's stack at the panic
}

func (e *PanicError) Error() string { return fmt.Sprintf("msgx: handler panicked: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
