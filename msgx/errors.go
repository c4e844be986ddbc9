package msgx

import (
	"errors"
	"fmt"
)

// ErrNoKey: the message has no idempotency key (no message id, or Options.Key returned ""). Such a
// message is dead-lettered without running: it could not be deduplicated.
var ErrNoKey = errors.New("msgx: message has no idempotency key")

// PanicError is a handler's panic, recovered and treated as a retryable failure (the message is
// redelivered, and dead-lettered once Options.MaxAttempts is reached).
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
