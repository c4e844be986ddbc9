package idemkit

import "time"

// Status is the state of a record.
type Status string

// Record states. See the package documentation for the transitions.
const (
	// StatusProcessing: an attempt holds the record until LeaseUntil.
	StatusProcessing Status = "PROCESSING"
	// StatusSucceeded: finished; Response is replayed to duplicates.
	StatusSucceeded Status = "SUCCEEDED"
	// StatusFailed: failed with a retryable error; the next attempt takes it over.
	StatusFailed Status = "FAILED"
	// StatusRejected: failed with a permanent error; Error (and Response) are replayed.
	StatusRejected Status = "REJECTED"
)

// Valid reports whether s is one of the four states.
func (s Status) Valid() bool {
	switch s {
	case StatusProcessing, StatusSucceeded, StatusFailed, StatusRejected:
		return true
	}
	return false
}

// Terminal reports whether s is replayed rather than run again: SUCCEEDED or REJECTED.
func (s Status) Terminal() bool { return s == StatusSucceeded || s == StatusRejected }

// Record is the dedupe record of one (Scope, Key).
type Record struct {
	Scope string // business type, e.g. "POST /orders"; at most [MaxStoredLen] bytes
	Key   string // idempotency key; at most [MaxStoredLen] bytes
	// Status is the record's state.
	Status Status
	// Fence is bumped on every claim and takeover; the first claim has fence 1.
	Fence int64
	// Owner is the random token of the attempt that claimed the record ("" once recovered by a sweeper).
	Owner string
	// Fingerprint is a hash of the request payload; "" when the caller gave none.
	Fingerprint string
	// GID and BranchID tie the record to a distributed transaction (DTM); "" otherwise.
	GID      string
	BranchID string
	// Response is the stored result (SUCCEEDED, optionally REJECTED).
	Response []byte
	// Error is the message of the last failure (FAILED, REJECTED).
	Error string
	// LeaseUntil is when a PROCESSING claim may be taken over.
	LeaseUntil time.Time
	// ExpiresAt is when the record stops counting; afterwards it is treated as absent.
	ExpiresAt time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Version is the state a write was decided from: the claim (fence and owner) and its status. Stores
// compare it before every update and delete, so a write never lands on a record that moved on — taken
// over (new fence and owner) or finished (new status) by someone else.
type Version struct {
	Fence  int64
	Owner  string
	Status Status
}

// Version returns the record's fence, owner and status.
func (r *Record) Version() Version { return Version{Fence: r.Fence, Owner: r.Owner, Status: r.Status} }

// Expired reports whether the record no longer counts at now.
func (r *Record) Expired(now time.Time) bool {
	return !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt)
}

// IsMark reports whether the record is a mark (written by Mark, MarkTx or TxMark): SUCCEEDED with no
// lease, which every other mode's record has.
func (r *Record) IsMark() bool { return r.Status == StatusSucceeded && r.LeaseUntil.Equal(r.CreatedAt) }

// LeaseExpired reports whether a PROCESSING record's lease has run out at now.
func (r *Record) LeaseExpired(now time.Time) bool { return !now.Before(r.LeaseUntil) }
