// Package hooks ties an idempotency record to the outcome of the global transaction it started.
//
// A [Lifecycle] runs three steps around a distributed transaction (a DTM saga or TCC, or a 2-phase
// message published by package dtmmsg):
//
//   - Begin, before the transaction starts: claim the record PROCESSING with the transaction's gid (a
//     duplicate gets the stored result or ErrInFlight and no transaction starts), then run the user's
//     BeforeTransaction hooks.
//   - Commit, when the transaction succeeded: run the user's Commit hooks, then mark the record
//     SUCCEEDED with the result.
//   - Rollback, when it rolled back: run the user's Rollback hooks, then mark the record FAILED, so the
//     client may retry with the same key.
//
// When the outcome is not known in time the initiator calls Detach: the record stays PROCESSING and a
// [Reconciler] settles it later by asking the transaction manager, running the same Commit or Rollback
// hooks. User hooks may therefore run more than once for one transaction (the initiator and the
// reconciler can both see the outcome) and must be idempotent, e.g. "UPDATE orders SET status='PAID'
// WHERE gid=?".
//
// [Lifecycle.Run] does it all for one transaction: it stores the transaction's result with the claim
// (so a record settled by the reconciler carries it), renews the claim right before the start (never
// starting on a lost claim), takes only the manager's own refusal for "not started" (a timeout or a
// gateway's 5xx leaves the record to the reconciler) and reports the rollback reason. The reconciler
// fences a gid the manager never heard of before it rolls the record back, so a late start of it is
// refused.
package hooks

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/background"
)

// Txn is one global transaction followed by a Lifecycle. A hook is given a copy: what it changes in
// it changes nothing of the transaction the Lifecycle follows.
type Txn struct {
	// TransType is the transaction kind: "saga" or "tcc", or "msg" (dtmmsg.TransType) for a 2-phase
	// message that dtmmsg's Publisher or Reconciler follows with the same Lifecycle.
	TransType string
	// GID is the global transaction id.
	GID string
	// Record is the idempotency record as claimed by Begin (as settled, once Commit or Rollback wrote
	// it), or as read by the Reconciler. Its zero value means there is no record (a Lifecycle without
	// a Guard).
	Record idemkit.Record

	claim *idemkit.Claim
	// chosen is set when the gid is the caller's (RunParams.GID): the manager may hold it for
	// another transaction, whose status is not this one's.
	chosen bool
	// noHooks is set when the manager held the gid before the claim: it is another transaction's,
	// and neither the Before nor the Rollback hook runs for it.
	noHooks bool
}

// forHook returns a copy of t for a hook to read: its fields are exported, and a hook that changed
// them (its GID, its Record) would change the transaction the Lifecycle follows — the later hooks
// run for another gid, the record compared with it.
func (t *Txn) forHook() *Txn {
	c := *t
	return &c
}

// BeforeTransaction runs before a global transaction starts; an error stops it from starting.
type BeforeTransaction interface {
	BeforeTransaction(ctx context.Context, t *Txn) error
}

// Commit runs when a global transaction succeeded.
type Commit interface {
	Commit(ctx context.Context, t *Txn, result []byte) error
}

// Rollback runs when a global transaction rolled back; reason says why when known.
type Rollback interface {
	Rollback(ctx context.Context, t *Txn, reason error) error
}

// BeforeTransactionFunc adapts a function to [BeforeTransaction].
type BeforeTransactionFunc func(ctx context.Context, t *Txn) error

// BeforeTransaction calls f.
func (f BeforeTransactionFunc) BeforeTransaction(ctx context.Context, t *Txn) error { return f(ctx, t) }

// CommitFunc adapts a function to [Commit].
type CommitFunc func(ctx context.Context, t *Txn, result []byte) error

// Commit calls f.
func (f CommitFunc) Commit(ctx context.Context, t *Txn, result []byte) error {
	return f(ctx, t, result)
}

// RollbackFunc adapts a function to [Rollback].
type RollbackFunc func(ctx context.Context, t *Txn, reason error) error

// Rollback calls f.
func (f RollbackFunc) Rollback(ctx context.Context, t *Txn, reason error) error {
	return f(ctx, t, reason)
}

// ErrRolledBack is the reason recorded on a record whose global transaction rolled back.
var ErrRolledBack = errors.New("hooks: global transaction rolled back")

// rolledBack is the reason of a rollback given none: ErrRolledBack, marked idemkit.Retryable. The rollback
// reasons this package makes say the key may run again (FAILED), whatever Options.IsPermanent says of
// them; only an initiator's permanent error (a TCC try's) rolls a record back REJECTED.
var rolledBack = idemkit.Retryable(ErrRolledBack)

// Lifecycle runs the hooks of global transactions and keeps their records. All fields are optional:
// without a Guard no record is kept, without hooks only the record is. A Lifecycle is safe for
// concurrent use once built; do not change its fields afterwards.
type Lifecycle struct {
	// Guard keeps the idempotency records.
	Guard *idemkit.Guard
	// Before, OnCommit and OnRollback are the user's hooks.
	Before     BeforeTransaction
	OnCommit   Commit
	OnRollback Rollback
}

// IsPermanent reports whether err is a permanent failure by the rule the records follow: the
// Guard's classifier ([idemkit.Guard.IsPermanent]), or [idemkit.IsPermanent] without a Guard.
// Initiators ask it to give DTM a permanent rollback reason ([PermanentReason]), so a Reconciler
// settling the record after a crash records what the initiator would have.
func (l *Lifecycle) IsPermanent(err error) bool {
	if l.Guard != nil {
		return l.Guard.IsPermanent(err)
	}
	return idemkit.IsPermanent(err)
}

// Begin claims the record for call with gid and runs the Before hook. Exactly one of its results is
// meaningful: a *Txn to run the transaction under; a replayed result (Replayed set, possibly with an
// *idemkit.RejectedError) when the key already finished; or an error (ErrInFlight while another
// attempt's transaction is running, a Guard error, or the Before hook's error — the Rollback hook then
// runs for the gid, which never starts, and the record is FAILED so a retry may run).
//
// A permanent Before error (see idemkit.Permanent) makes the record REJECTED, and Begin returns it in
// the shape a replay of the key returns: an error for which errors.As finds an *idemkit.RejectedError
// with the stored message (so one check, errors.Is(err, idemkit.ErrRejected), serves the first call
// and every replay). On the first call the error also wraps the hook's own error. A panic in the
// Before hook rolls the record back as a failing hook does (FAILED, the key free again: nothing
// started) before it goes on with its value.
func (l *Lifecycle) Begin(ctx context.Context, transType, gid string, call idemkit.Call) (*Txn, idemkit.Result, error) {
	return l.begin(ctx, transType, gid, gid, call, true)
}

// begin is Begin, storing recordGID on the record rather than gid, and running the Before hook only
// when runBefore is set (Run claims the record of a gid the manager already holds without it, and runs no
// hook for it: see RunParams.GID).
func (l *Lifecycle) begin(ctx context.Context, transType, gid, recordGID string, call idemkit.Call, runBefore bool) (*Txn, idemkit.Result, error) {
	t := &Txn{TransType: transType, GID: gid, noHooks: !runBefore}
	if l.Guard != nil {
		call.GID = recordGID
		cl, res, err := l.Guard.Begin(ctx, call)
		if cl == nil {
			return nil, res, err
		}
		t.claim, t.Record = cl, cl.Record()
	}
	if l.Before != nil && runBefore {
		if err := l.before(ctx, t); err != nil {
			return nil, idemkit.Result{}, l.failBefore(ctx, t, err)
		}
	}
	return t, idemkit.Result{}, nil
}

// errBeforePanicked is the outcome of a claim whose Before hook panicked: nothing started, so the key
// may run again (retryable whatever Options.IsPermanent says).
var errBeforePanicked = idemkit.Retryable(errors.New("hooks: panic in the BeforeTransaction hook"))

// before runs the Before hook for t. A panic in it rolls t's claim back as a failed hook does (FAILED,
// the lock released: the transaction never starts) before it goes on; left PROCESSING with its gid,
// the key would answer in flight until a Reconciler fenced the gid.
func (l *Lifecycle) before(ctx context.Context, t *Txn) error {
	panicked := true
	defer func() {
		if panicked {
			_ = l.failBefore(ctx, t, errBeforePanicked)
		}
	}()
	err := l.Before.BeforeTransaction(ctx, t.forHook())
	panicked = false
	return err
}

// failBefore ends t, whose Before hook failed with err (or panicked), and returns Begin's error. The
// transaction never starts, and the Rollback hook runs for its gid, as for every gid that never
// started: the Before hook may have written before it failed (its row committed, then a second
// statement refused, a lost reply, a panic), and nothing else ever would run a hook for that gid — no
// Reconciler looks at the record it rolls back. Then the claim is finished, also when the Rollback
// hook failed (its error is returned too) or panicked (the panic then goes on): the key is free again.
func (l *Lifecycle) failBefore(ctx context.Context, t *Txn, err error) error {
	wrapped := fmt.Errorf("hooks: before transaction %s: %w", t.GID, err)
	if l.OnRollback == nil {
		return l.finishBefore(ctx, t, err, wrapped)
	}
	finished := false
	defer func() {
		if !finished { // the Rollback hook panicked: the claim is finished before the panic goes on
			_ = l.finishBefore(ctx, t, err, wrapped)
		}
	}()
	sctx, cancel := background.Settling(ctx) // the hook runs also when the caller left (the hook's error)
	defer cancel()
	herr := l.OnRollback.Rollback(sctx, t.forHook(), fmt.Errorf("%w (never started): the BeforeTransaction hook failed: %w", ErrRolledBack, err))
	finished = true
	ferr := l.finishBefore(ctx, t, err, wrapped)
	if herr != nil {
		return errors.Join(ferr, fmt.Errorf("hooks: rollback %s: %w", t.GID, herr))
	}
	return ferr
}

// finishBefore finishes t's claim after its Before hook failed with err, and returns Begin's error:
// wrapped, in the shape a replay returns when the record is REJECTED.
func (l *Lifecycle) finishBefore(ctx context.Context, t *Txn, err, wrapped error) error {
	if t.claim == nil {
		if l.IsPermanent(err) {
			return &rejection{rej: &idemkit.RejectedError{Message: err.Error()}, cause: wrapped}
		}
		return wrapped
	}
	cl := t.claim
	t.claim = nil
	if _, ferr := cl.Finish(ctx, nil, err); ferr != nil && (errors.Is(ferr, idemkit.ErrFenced) || errors.Is(ferr, idemkit.ErrStoreUnavailable)) {
		return errors.Join(wrapped, ferr)
	}
	if rec := cl.Record(); rec.Status == idemkit.StatusRejected {
		return &rejection{rej: &idemkit.RejectedError{Message: rec.Error}, cause: wrapped}
	}
	return wrapped
}

// rejection is a permanent failure on its first call: the *idemkit.RejectedError a replay of the key
// returns, wrapping the error that caused it.
type rejection struct {
	rej   *idemkit.RejectedError
	cause error
}

func (e *rejection) Error() string   { return e.rej.Error() }
func (e *rejection) Unwrap() []error { return []error{e.rej, e.cause} }

// Commit runs the OnCommit hook, then marks the record SUCCEEDED with result. When the hook fails the
// record is left PROCESSING (for the reconciler to retry the hook) and the hook's error is returned. It
// returns idemkit.ErrFenced when the record was settled by someone else in the meantime.
func (l *Lifecycle) Commit(ctx context.Context, t *Txn, result []byte) error {
	if l.OnCommit != nil {
		if err := l.OnCommit.Commit(ctx, t.forHook(), result); err != nil {
			l.Detach(ctx, t)
			return fmt.Errorf("hooks: commit %s: %w", t.GID, err)
		}
	}
	return l.settle(ctx, t, result, nil)
}

// Rollback runs the OnRollback hook, then marks the record FAILED (a retry with the same key runs
// again). Errors as for Commit.
func (l *Lifecycle) Rollback(ctx context.Context, t *Txn, reason error) error {
	if reason == nil {
		reason = rolledBack
	}
	if l.OnRollback != nil {
		if err := l.OnRollback.Rollback(ctx, t.forHook(), reason); err != nil {
			l.Detach(ctx, t)
			return fmt.Errorf("hooks: rollback %s: %w", t.GID, err)
		}
	}
	return l.settle(ctx, t, nil, reason)
}

// Detach leaves the record PROCESSING for the Reconciler and releases the claim's lock.
func (l *Lifecycle) Detach(ctx context.Context, t *Txn) {
	if t.claim != nil {
		t.claim.Detach(ctx)
		t.claim = nil
	}
}

func (l *Lifecycle) settle(ctx context.Context, t *Txn, result []byte, reason error) error {
	if t.claim != nil {
		cl := t.claim
		t.claim = nil
		_, err := cl.Finish(ctx, result, reason)
		// Finish returns reason itself when the record was written; anything else says the write
		// failed (fenced, the store unavailable, or its time up: FinishTimeout), except an outcome
		// the Store refused and recorded REJECTED instead, which is settled.
		if err != nil && err != reason && !replacementStored(err) {
			return err
		}
		t.Record = cl.Record() // as settled: SUCCEEDED, FAILED or REJECTED
		return nil
	}
	if l.Guard == nil || t.Record.Status == "" {
		return nil
	}
	err := l.Guard.Settle(ctx, &t.Record, result, reason)
	if replacementStored(err) {
		return nil // refused values, a replacement outcome stored: settled, as above
	}
	return err
}

// replacementStored reports whether err, from Claim.Finish or Guard.Settle, says only that the Store
// refused the outcome's values and a replacement outcome was stored: ErrUnstorable, and not a
// failure of the replacement's own write (fenced, the store unavailable, the time up).
func replacementStored(err error) bool {
	return errors.Is(err, idemkit.ErrUnstorable) && !errors.Is(err, idemkit.ErrFenced) &&
		!errors.Is(err, idemkit.ErrStoreUnavailable) && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, context.DeadlineExceeded)
}
