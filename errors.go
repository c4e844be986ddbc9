package idemkit

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by a Guard. Compare with errors.Is.
var (
	// ErrInFlight: another attempt holds the key. The error is an [*InFlightError] carrying a retry hint.
	ErrInFlight = errors.New("idemkit: request in flight")
	// ErrPayloadMismatch: the key was first used with a different fingerprint.
	ErrPayloadMismatch = errors.New("idemkit: idempotency key reused with a different payload")
	// ErrFenced: the attempt's record changed before it finished — taken over by a newer attempt (its
	// lease ran out), ended by a sweeper or an operator, deleted, or settled by another — so its
	// result was not stored. Whoever changed the record decides the outcome. The Guard's errors say
	// which, as far as a read of the record tells.
	ErrFenced = errors.New("idemkit: claim fenced")
	// ErrRejected: the key finished with a permanent error, replayed as an [*RejectedError].
	ErrRejected = errors.New("idemkit: request rejected")
	// ErrDuplicate: Mark mode saw the key already marked.
	ErrDuplicate = errors.New("idemkit: duplicate request")
	// ErrStoreUnavailable: the record store failed; nothing ran, or the result could not be recorded.
	// A store error met once the caller's context ended is that context's error instead (the caller
	// left; the store's error is wrapped beside it).
	ErrStoreUnavailable = errors.New("idemkit: record store unavailable")
	// ErrLockUnavailable: the Locker failed and fail-open is off; nothing ran.
	ErrLockUnavailable = errors.New("idemkit: lock unavailable")
	// ErrInvalidKey: the key or scope is empty, too long, not UTF-8 or has control characters.
	ErrInvalidKey = errors.New("idemkit: invalid idempotency key")
	// ErrNilFunc: a nil function was passed.
	ErrNilFunc = errors.New("idemkit: nil function")
	// ErrLockLost: the watchdog could not keep the claim alive; the work context is cancelled with it.
	ErrLockLost = errors.New("idemkit: lock lost")
	// ErrRollbackReplayed: [Guard.DoTx] ran the function in the caller's transaction, then found the
	// key finished by another attempt. The Result it returns with this error is the stored answer
	// (Replayed); the function's writes must not commit, so the caller must roll its transaction
	// back — returning the error from db.Transaction's function does exactly that.
	ErrRollbackReplayed = errors.New("idemkit: key finished by another attempt: roll back and use the replayed result")
)

// Errors returned by Store and Locker implementations to the Guard.
var (
	// ErrNotFound: no record (Store.Get) or nothing cached.
	ErrNotFound = errors.New("idemkit: record not found")
	// ErrConflict: the database rolled a Store's statement back with its whole transaction to resolve
	// a write conflict (a deadlock, a serialization failure, a Galera certification failure): nothing
	// of that transaction happened, and running it again from the start may succeed. Stores wrap it in
	// such errors (record.ErrConflict matches it). [Guard.TxMark] runs its transaction again, a few
	// times at most, when the mark met one before the function ran.
	ErrConflict = errors.New("idemkit: transaction rolled back by the database on a write conflict")
	// ErrNotSent: a Store's write never reached its database — its caller's context ended while it
	// waited for its turn (record.Store's group commit) — so it never takes effect. Stores wrap it
	// with the context's error. The Guard then watches for no claim of that write to land (see
	// [Guard.Wait]): only a claim that may land is released after its caller left. A Locker's
	// Acquire returns it the same way for a command its caller's end kept from being sent (the
	// Redis Locker's pipeline queue): it took no lock, and the Guard releases none.
	ErrNotSent = errors.New("idemkit: write not sent")
	// ErrExists: Store.Insert found a record with the same scope and key.
	ErrExists = errors.New("idemkit: record exists")
	// ErrLocked: Locker.Acquire found the key locked by another token. Lockers return an
	// [*InFlightError], which matches both ErrLocked and ErrInFlight.
	ErrLocked = errors.New("idemkit: key locked")
	// ErrLockNotHeld: Locker.Refresh or Release found the lock gone or held by another token.
	ErrLockNotHeld = errors.New("idemkit: lock not held")
	// ErrUnstorable: a Store cannot hold a value of the record as given (a result larger than its
	// column, text its database refuses). Stores wrap it; the Guard then stores a replacement outcome
	// the Store can hold (see [Claim.Finish]) rather than leave the record to be run again. The Guard
	// also returns it, before anything runs, for a [Call] whose Fingerprint, GID or BranchID no Store
	// holds (longer than MaxStoredLen bytes, not UTF-8, or holding a NUL).
	ErrUnstorable = errors.New("idemkit: value cannot be stored")
)

// InFlightError reports a key held by another attempt. It matches [ErrInFlight] and [ErrLocked].
type InFlightError struct {
	// RetryAfter is how long the current holder may still hold the key; a hint, never negative.
	RetryAfter time.Duration
	// Holder is the token the key is held with, when the Locker tells it (both of idemkit's do, from
	// Acquire): the Guard reads from it whether the holder runs another payload (from the record
	// when the token carries no fingerprint hash), and answers ErrPayloadMismatch then rather than in
	// flight (in the Tx modes, whose records are written at commit, only when a record binds the key
	// to another payload).
	Holder string
}

func (e *InFlightError) Error() string {
	return fmt.Sprintf("%s (retry after %s)", ErrInFlight.Error(), e.RetryAfter.Round(time.Millisecond))
}

// Is reports whether target is ErrInFlight or ErrLocked.
func (e *InFlightError) Is(target error) bool { return target == ErrInFlight || target == ErrLocked }

// RejectedError is a permanent failure stored for a key and replayed to duplicates. It matches
// [ErrRejected].
type RejectedError struct {
	// Message is the text of the original permanent error.
	Message string
}

func (e *RejectedError) Error() string { return "idemkit: request rejected: " + e.Message }

// Is reports whether target is ErrRejected.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// PermanentError marks an error as permanent: the Guard stores it (REJECTED) and replays it to duplicates
// instead of letting them run again. Create one with [Permanent].
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as a permanent business failure (insufficient funds, invalid input): it is recorded
// as REJECTED and replayed. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err was marked with [Permanent]. It is the default [Options.IsPermanent].
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// RetryableError marks an error as retryable whatever Options.IsPermanent says of it: the Guard
// records it FAILED and a retry runs again. Create one with [Retryable].
type RetryableError struct{ Err error }

func (e *RetryableError) Error() string { return e.Err.Error() }
func (e *RetryableError) Unwrap() error { return e.Err }

// Retryable marks err as a failure a retry must run again, even under an Options.IsPermanent that
// calls every unknown error permanent: adapters mark so the outcomes they do not store (a response
// httpx's StorePolicy refuses, a hijacked connection) and the Guard its own panic error. A [Permanent]
// mark still wins. Retryable(nil) is nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &RetryableError{Err: err}
}

// IsRetryable reports whether err was marked with [Retryable].
func IsRetryable(err error) bool {
	var r *RetryableError
	return errors.As(err, &r)
}
