package hooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/txstatus"
)

// Outcome is what became of a global transaction started by [Lifecycle.Run].
type Outcome struct {
	// GID of the transaction; "" when a replay answered without starting one.
	GID string
	// Status is Succeed or Failed when the outcome was known in time, else the last status seen
	// (Prepared, Submitted, Aborting or Unknown): the record stays PROCESSING for the Reconciler.
	Status txstatus.Status
	// Replayed is set when the key had already finished: no transaction was started and Result is
	// the stored result.
	Replayed bool
	Result   []byte
	// Reason says why a transaction failed to start or rolled back, when known.
	Reason error
}

// RunParams describe one global transaction for [Lifecycle.Run].
type RunParams struct {
	// TransType is "saga" or "tcc".
	TransType string
	// Call is the idempotency identity of the operation the transaction performs.
	Call idemkit.Call
	// Start builds and starts the transaction with gid (a saga's Submit, a TCC's whole global
	// function). Required.
	Start func(ctx context.Context, gid string) error
	// Status asks the transaction manager. Required.
	Status *txstatus.Client
	// Wait bounds how long Run waits for the outcome after Start, whether or not ctx is cancelled
	// meanwhile. 0 waits not at all: the record stays PROCESSING until the Reconciler settles it.
	// Keep the Guard's Lease above Wait: the Reconciler settles records whose lease ran out.
	Wait time.Duration
	// Result is stored on the record when the transaction succeeds and replayed to duplicates.
	Result []byte
}

// Run starts a global transaction under the lifecycle: Begin (claim the record with a fresh gid, or
// answer a duplicate from the record), Start, wait up to Wait for the outcome, then Commit, Rollback
// or Detach. It returns an error only when the call could not proceed (in flight, store or lock
// failure, a failing hook, the transaction manager unreachable); a transaction that rolled back is an
// Outcome with Status Failed and a nil error. A replayed permanent failure returns an
// *idemkit.RejectedError with the Outcome.
//
// When Start fails, the manager is asked whether the transaction exists: if it refused the start
// (it answered, and has no record of the gid) the record is rolled back and the key is free again; if
// the start was lost in transit (a timeout or a transport error) the record is detached, because the
// manager may still record the transaction, and the Reconciler settles it after the lease. A final
// outcome that a Reconciler recorded first (the wait outlived the lease) is reported without error.
func (l *Lifecycle) Run(ctx context.Context, p RunParams) (Outcome, error) {
	if p.Start == nil || p.Status == nil {
		return Outcome{}, errors.New("hooks: RunParams needs Start and Status")
	}
	gid := txstatus.NewGID()
	t, res, err := l.Begin(ctx, p.TransType, gid, p.Call)
	if t == nil {
		if res.Replayed {
			return Outcome{Replayed: true, Result: res.Value}, err
		}
		return Outcome{}, err
	}
	out := Outcome{GID: gid}
	if startErr := p.Start(ctx, gid); startErr != nil {
		out.Reason = startErr
		// Did the transaction reach the manager? Only it can tell.
		st, err := p.Status.Status(ctx, gid)
		switch {
		case err != nil:
			l.Detach(ctx, t)
			return out, fmt.Errorf("hooks: starting %s %s: %w (and its status is unknown: %w)", p.TransType, gid, startErr, err)
		case st == txstatus.Unknown && transportError(startErr):
			// A timeout or a dropped connection says nothing about whether the request reached the
			// manager, which may still record it: rolling back now would let a retry with the same key
			// start a second transaction beside it. The Reconciler asks again once the lease ran out.
			l.Detach(ctx, t)
			return out, fmt.Errorf("hooks: starting %s %s: %w (the manager has no record of it yet; left to the reconciler)", p.TransType, gid, startErr)
		case st == txstatus.Unknown:
			// The manager answered and refused: nothing started.
			out.Status = txstatus.Failed
			return out, l.Rollback(ctx, t, fmt.Errorf("%w: never started: %w", ErrRolledBack, startErr))
		}
	}
	out.Status = txstatus.Submitted
	if p.Wait > 0 {
		// The wait survives the caller's cancellation (a client that disconnects from an HTTP
		// handler): the transaction is running anyway, and its outcome is what the record and the
		// stored response should say. Wait alone bounds it.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.Wait)
		st, err := p.Status.Wait(wctx, gid)
		cancel()
		if err != nil {
			l.Detach(ctx, t)
			return out, fmt.Errorf("hooks: waiting for %s: %w", gid, err)
		}
		out.Status = st
	}
	err = l.Conclude(ctx, t, out.Status, p.Result)
	if errors.Is(err, idemkit.ErrFenced) && out.Status.Final() {
		// The wait outlived the claim's lease and a Reconciler settled the record first, from the
		// same final status the manager gave us: the outcome stands and the record agrees with it.
		return out, nil
	}
	return out, err
}

// Conclude applies a transaction status to t: Commit with result on Succeed, Rollback on Failed,
// Detach on anything else (still running).
func (l *Lifecycle) Conclude(ctx context.Context, t *Txn, st txstatus.Status, result []byte) error {
	switch st {
	case txstatus.Succeed:
		return l.Commit(ctx, t, result)
	case txstatus.Failed:
		return l.Rollback(ctx, t, nil)
	default:
		l.Detach(ctx, t)
		return nil
	}
}

// transportError reports whether err is a transport failure or a timeout (the request may or may not
// have reached the server) rather than the server's answer.
func transportError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}
