package hooks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/background"
	"github.com/idemkit/idemkit/txstatus"
)

// Outcome is what became of a global transaction started by [Lifecycle.Run].
type Outcome struct {
	// GID of the transaction; "" when a replay answered without starting one.
	GID string
	// Status is Succeed or Failed when the outcome was known in time, else the last status seen
	// (Prepared, Submitted, Aborting or Unknown): the record stays PROCESSING for the Reconciler.
	Status txstatus.Status
	// Replayed is set when the key had already finished: no transaction was started.
	Replayed bool
	// Result is the transaction's result: the stored one on a replay; on a first call, the claim's
	// (Call.Result, else RunParams.Result) — the same bytes a replay will return — unless the
	// transaction rolled back, is rolling back (Aborting), was not submitted (Prepared) or never
	// started.
	Result []byte
	// Reason says why a transaction failed to start, rolled back or is rolling back (Aborting): it
	// matches ErrRolledBack and carries the initiator's error (a TCC try that failed, a start DTM
	// refused) or DTM's rollback reason (the message of the saga step that failed, a timeout). For a
	// transaction left Prepared by a start that failed, it is that error. Nil otherwise.
	Reason error
}

// RunParams describe one global transaction for [Lifecycle.Run].
type RunParams struct {
	// TransType is "saga" or "tcc".
	TransType string
	// Call is the idempotency identity of the operation the transaction performs.
	Call idemkit.Call
	// GID is the transaction's gid. Defaults to a fresh txstatus.NewGID(). Set it to know the gid
	// before the call (to put it in Result); it must be new for every call, and free of ';', CR and
	// LF, which DTM's HTTP API removes from gids (Run refuses such a gid before anything starts), and
	// at most idemkit.MaxStoredLen (128) bytes, which the record stores: a longer one fails the call
	// before anything is claimed, with an error matching idemkit.ErrUnstorable — also one of 128
	// characters or fewer that barrier.ValidateGid accepts, when they are not all ASCII. Run
	// asks the manager about a gid given here before it starts anything (one query more), and a gid
	// the manager knows — in any state, even still running — rolls the call back without starting
	// anything: DTM itself accepts a submit or a prepare for a gid it holds as submitted or prepared.
	// A gid the manager already holds when Run is called is not stored on the record (its GID stays
	// empty), so that no Reconciler takes that transaction for this call's, and no hook runs for it
	// (neither Before nor Rollback): hooks keyed by the gid would write to that transaction's rows.
	// Nor is one the manager could not be asked about then (unreachable, a gateway's 5xx): the call
	// starts nothing, runs no hook, and returns an error (an outage: retry later), which matches
	// txstatus.ErrNotSent when the manager could not even be connected to, as for a start never sent.
	// When a call with a gid given here starts nothing and its Rollback hook fails, the record is
	// rolled back all the same and Run returns the hook's error (a hook that panics: the record is
	// rolled back, then the panic goes on): the Reconciler, which follows the
	// manager's status for the gid, would take another transaction holding it for this call's.
	// It must not start with "msg-" (dtmmsg.GIDPrefix), which marks a 2-phase message's record: the
	// Reconciler leaves such records to dtmmsg.Reconciler (Run refuses such a gid before anything
	// starts). Gids that differ only in letter case or in trailing spaces are one gid to DTM on its
	// MySQL store (its column's collation; found by a defect hunt): choose gids that differ otherwise
	// (fresh txstatus.NewGID gids do), or two keys may be settled by one transaction's outcome.
	GID string
	// Start builds and starts the transaction with gid (a saga's submit, a TCC's prepare, tries and
	// submit). Required. An error matching txstatus.ErrRefused says the transaction certainly did
	// not start: DTM refused the call that creates it (a saga's submit, a TCC's prepare), or nothing
	// was sent. Run then rolls the record back whatever DTM holds for gid, since a refused gid may be
	// held by another transaction. An error matching txstatus.ErrNotSent says the call that creates it
	// never reached DTM (it could not be connected to): Run rolls the record back too, and returns an
	// error (an outage: retry later). Start must therefore not let a refusal, or a failure to connect,
	// of a later call (a TCC's submit or abort after its tries, on a transaction that exists) match
	// ErrRefused or ErrNotSent. Any other error is an unknown outcome — the request may have reached
	// DTM — which Run never takes for a refusal. A Start that aborted its transaction for a reason
	// (a TCC try's error) and whose abort was not acknowledged returns an *AbortError.
	Start func(ctx context.Context, gid string) error
	// Status asks the transaction manager. Required.
	Status *txstatus.Client
	// Wait bounds how long Run waits for the outcome after Start, whether or not ctx is cancelled
	// meanwhile; the question whether a Start that failed reached the manager (a submit cut short by
	// the cancellation may have), and the Commit or Rollback hook and the record's settlement that
	// follow, run on a context that survives the cancellation too. 0 waits not at all: the record
	// stays PROCESSING until the Reconciler settles it — unless Start failed and the manager, asked then, already reports the
	// outcome (a TCC whose try failed, aborted by its initiator), which is settled at once.
	// Keep the Guard's Lease above Wait: the Reconciler settles records whose lease ran out.
	Wait time.Duration
	// Result is the transaction's result (an order id, a gid...), replayed to duplicates once it
	// succeeded. It is stored with the claim (as Call.Result, unless that is set), so the record
	// carries it whoever settles it: this call, or the Reconciler after this process died.
	Result []byte
}

// Run starts a global transaction under the lifecycle: Begin (claim the record with the gid, or
// answer a duplicate from the record), renew the claim, Start, wait up to Wait for the outcome, then
// Commit, Rollback or Detach. It returns an error only when the call could not proceed (in flight,
// store or lock failure, a failing hook, the transaction manager unreachable or its answer unknown, the
// claim lost before the start); a transaction that rolled back is an Outcome with Status Failed and a
// nil error. A permanent failure is an *idemkit.RejectedError, on a replay as on the first call (see
// [Lifecycle.Begin]). A Status whose PollInterval is negative (which its wait refuses) is refused before
// anything is claimed or started.
//
// The claim is renewed right before Start and Start is not called when that fails: a claim whose lease
// ran out may have been settled by a Reconciler, which fences the gid at DTM first (see
// [txstatus.Client.Fence]); Run then returns an error matching idemkit.ErrFenced — and runs the
// Rollback hook again for its gid, which never started (that Reconciler ran it, maybe before the writes
// of a Before hook that outlived the lease existed), also when a retry of the key took the record over
// since; not when the record says the gid succeeded — or, when only the lock was
// lost, rolls the record back (nothing started) and reports Failed. A caller gone by then (ctx ended)
// has the record rolled back too (Failed, nothing started, the key free again) and gets an error. With
// a gid chosen up front (RunParams.GID), a manager that cannot be asked whether it is free
// (unreachable, a gateway's 5xx) rolls the record back too, and Run returns an error (matching
// txstatus.ErrNotSent when the manager could not be connected to, as below).
//
// When Start fails with DTM's refusal of the call that creates the transaction (an error matching
// txstatus.ErrRefused) nothing started: the record is rolled back and the key is free again, whatever
// DTM holds for the gid (a reused gid is refused, and the transaction holding it is not this call's).
// When that call was never sent (an error matching txstatus.ErrNotSent: DTM could not be connected to)
// nothing started either: the record is rolled back, the key free again, and Run returns an error
// beside the Outcome (Failed): an outage, to retry later, not a transaction that rolled back.
// On any other failure the manager is asked whether the transaction exists: if it does, Run follows its
// status; if the manager has no record of it — a timeout, a reset connection, a 5xx from a proxy or
// gateway in front of DTM — the outcome is unknown: the record is detached, because the manager may
// still record the transaction, and the Reconciler settles it after the lease (fencing the gid if DTM
// never heard of it). A final outcome that a Reconciler recorded first (the wait outlived the lease) is
// reported without error when the record agrees with it; when it does not, Run returns an error
// matching idemkit.ErrFenced.
//
// A Succeed that DTM reports for a transaction that is not the one Start began (see
// [txstatus.Info.RanNothingFor]: a saga's submit that DTM accepted onto a Reconciler's fence between its
// prepare and its abort, and "succeeded" with none of the saga's steps) is not taken for a success: the
// record is rolled back (never started) and the Outcome is Failed.
//
// A panic in Start is settled as a start whose outcome is unknown (the manager is asked whether the
// transaction exists, and Run follows its status or leaves the record to the Reconciler), then goes on
// with its value. A Start that panics before sending anything should rather return an error matching
// txstatus.ErrRefused, and panic once Run returned, as saga.Initiator and tcc.Global do. A panic in the
// Before hook rolls the record back (FAILED, nothing started) before it goes on, as in [Lifecycle.Begin].
//
// A transaction that rolled back because of an error Start returned and the Guard classifies as
// permanent (a TCC try's idemkit.Permanent error) leaves the record REJECTED, and Run returns, beside
// the Outcome with Status Failed, the error a replay returns: errors.As finds an *idemkit.RejectedError
// with the stored message (the error also wraps the rollback reason).
func (l *Lifecycle) Run(ctx context.Context, p RunParams) (Outcome, error) {
	if p.Start == nil || p.Status == nil {
		return Outcome{}, errors.New("hooks: RunParams needs Start and Status")
	}
	if p.Status.PollInterval < 0 {
		// The wait would refuse it once the transaction started: refused before anything is
		// claimed or started instead.
		return Outcome{}, fmt.Errorf("hooks: RunParams.Status: PollInterval must not be negative, got %s", p.Status.PollInterval)
	}
	gid := cmp.Or(p.GID, txstatus.NewGID())
	if strings.ContainsAny(gid, ";\r\n") {
		// DTM's HTTP API removes these from the gids it is given: the transaction would run under
		// another gid than the record's, which no query or fence of this gid ever finds.
		return Outcome{}, fmt.Errorf("hooks: gid %q contains ';', CR or LF, which DTM removes from gids: choose another (see barrier.ValidateGid)", gid)
	}
	if strings.HasPrefix(gid, msgGIDPrefix) {
		// A 2-phase message's gid: the Reconciler passes its record over, and dtmmsg.Reconciler, which
		// settles such records, would take the transaction for a message whose local transaction never
		// committed and roll the record back, whatever became of the transaction.
		return Outcome{}, fmt.Errorf("hooks: gid %q starts with %q, which marks the gid of a 2-phase message (dtmmsg.GIDPrefix), whose records only dtmmsg.Reconciler settles: choose another", gid, msgGIDPrefix)
	}
	call := p.Call
	if call.Result == nil {
		call.Result = p.Result
	}
	recordGID, held := gid, txstatus.Unknown
	var heldErr error // the manager could not be asked whether the chosen gid is free
	if p.GID != "" {
		// A gid the manager already holds (reused) is not stored on the record: while the Before hook
		// runs, the claim's lease may run out, and a Reconciler would follow that other transaction as
		// this call's — recording its success, none of this call's steps run. The question below, once
		// the Before hook ran, refuses the start. A gid the manager cannot be asked about now is not
		// known to be free: it is not stored and no hook runs under it either, and the call ends below
		// as an outage — once the claim told whether the key is a replay or in flight.
		switch st, err := p.Status.Status(ctx, gid); {
		case err != nil:
			recordGID, heldErr = "", err
		case st != txstatus.Unknown:
			recordGID, held = "", st
		}
	}
	// No hook runs for a gid another transaction holds, or may hold: hooks are keyed by the gid, and
	// a Before hook's writes under it, or a Rollback hook's, would be that transaction's.
	t, res, err := l.begin(ctx, p.TransType, gid, recordGID, call, held == txstatus.Unknown && heldErr == nil)
	if t == nil {
		if res.Replayed {
			return Outcome{Replayed: true, Result: res.Value}, err
		}
		return Outcome{}, err
	}
	out := Outcome{GID: gid}
	t.chosen = p.GID != ""
	if rolledBack, err := l.renew(ctx, t, call); err != nil || rolledBack != nil {
		if rolledBack != nil {
			out.Status, out.Reason = txstatus.Failed, rolledBack
			return l.ended(ctx, call, gid, out, err) // a Reconciler may have rolled it back first
		}
		return out, err
	}
	if p.GID != "" {
		// A gid the caller chose may be held by another transaction, still running: DTM accepts a
		// saga's submit for a gid it holds as submitted and a TCC's prepare for one it holds as
		// prepared, and Run would then follow that transaction as its own — its success taken for
		// this call's, none of this call's steps run. Refuse a gid the manager knows before anything
		// starts, as DTM refuses one it holds in another state (the reason matches txstatus.ErrRefused
		// alike). Two calls that reuse one gid at the same moment can still both pass: only DTM could
		// close that. A fresh gid (NewGID) needs no such question.
		st, err := held, heldErr
		if st == txstatus.Unknown && err == nil {
			st, err = p.Status.Status(ctx, gid)
		}
		switch {
		case err != nil:
			// The manager could not be asked (unreachable, a gateway's 5xx): nothing started, so the
			// record is rolled back and the key is free again — but this is an outage, not a
			// transaction that rolled back, and the caller is told so (an error: retry later).
			out, rerr := l.neverStarted(ctx, t, call, out,
				idemkit.Retryable(fmt.Errorf("%w (never started): asking the manager whether gid %s is free: %w", ErrRolledBack, gid, err)))
			return out, errors.Join(fmt.Errorf("hooks: asking the manager whether gid %s is free: %w (nothing started; the key is free again)", gid, err), rerr)
		case st != txstatus.Unknown:
			return l.neverStarted(ctx, t, call, out,
				idemkit.Retryable(fmt.Errorf("%w (never started): %w: gid %s is held by a transaction the manager reports %s: choose a new gid for every call",
					ErrRolledBack, txstatus.ErrRefused, gid, st)))
		}
	}
	panicked, startErr := startOf(ctx, p.Start, gid)
	if panicked != nil {
		// Settled as a start whose outcome is unknown (the manager is asked, and followed or left to
		// the Reconciler), then the panic goes on with its value.
		defer panic(panicked.value)
	}
	out.Status = txstatus.Submitted
	var info txstatus.Info
	if startErr != nil {
		out.Reason = startErr
		if errors.Is(startErr, txstatus.ErrNotSent) {
			// The call that creates the transaction never reached the manager (it could not be
			// connected to): nothing started, and the record is rolled back, the key free again. An
			// outage, not a transaction that rolled back: the caller is told so (an error: retry
			// later), as when the manager cannot be asked whether a chosen gid is free.
			out, rerr := l.neverStarted(ctx, t, call, out, idemkit.Retryable(fmt.Errorf("%w (never started): %w", ErrRolledBack, startErr)))
			return out, errors.Join(fmt.Errorf("hooks: starting %s %s: %w (nothing started; the key is free again)", p.TransType, gid, startErr), rerr)
		}
		if errors.Is(startErr, txstatus.ErrRefused) {
			// DTM refused the call that creates the transaction (or nothing was sent): nothing of this
			// call started, whatever the manager holds for gid — a gid held by another transaction
			// (one reused, or a Reconciler's fence) is refused too, and its status is not ours.
			return l.neverStarted(ctx, t, call, out, idemkit.Retryable(fmt.Errorf("%w (never started): %w", ErrRolledBack, startErr)))
		}
		// Did the transaction reach the manager? Only it can tell, and it is asked whether or not the
		// caller is still there: a start cut short by the caller's cancellation may have reached it,
		// and what follows a start (the wait, the settlement) outlives the caller.
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(p.Wait, txstatus.DefaultTimeout))
		info, err = p.Status.Query(qctx, gid)
		cancel()
		switch st := info.Status; {
		case err != nil:
			l.Detach(ctx, t)
			return out, fmt.Errorf("hooks: starting %s %s: %w (and its status is unknown: %w)", p.TransType, gid, startErr, err)
		case st == txstatus.Unknown:
			// A timeout, a dropped connection or an answer that is not DTM's (a proxy's 502) says
			// nothing about whether the request reached the manager, which may still record it:
			// rolling back now would let a retry with the same key start a second transaction beside
			// it. The Reconciler asks again once the lease ran out, and fences the gid if DTM still
			// has no record of it.
			l.Detach(ctx, t)
			return out, fmt.Errorf("hooks: starting %s %s: %w (the manager has no record of it yet; left to the reconciler)", p.TransType, gid, startErr)
		default:
			// It exists, and its status is the last seen: a TCC the initiator aborted after a try
			// failed is failed (or aborting) already, whether or not Run waits.
			out.Status = st
		}
	}
	if p.Wait > 0 && !out.Status.Final() {
		// The wait survives the caller's cancellation (a client that disconnects from an HTTP
		// handler): the transaction is running anyway, and its outcome is what the record and the
		// stored response should say. Wait alone bounds it.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.Wait)
		info, err = p.Status.WaitInfo(wctx, gid)
		cancel()
		if err != nil {
			l.Detach(ctx, t)
			return out, fmt.Errorf("hooks: waiting for %s: %w", gid, err)
		}
		out.Status = info.Status
	}
	// From here on the transaction was started: its outcome is what the hooks and the record must
	// follow, whether or not the caller is still there (as for the wait).
	ctx, cancelSettle := background.Settling(ctx)
	defer cancelSettle()
	var notOurs error
	if out.Status == txstatus.Succeed && info.RanNothingFor(p.TransType) {
		// DTM accepted our start onto a transaction that already held gid (a Reconciler's fence,
		// between its prepare and its abort) and reports that one: nothing of ours ran.
		notOurs = startedElsewhere(gid, p.TransType, info)
		out.Status = txstatus.Failed
	}
	switch out.Status {
	case txstatus.Succeed:
		// The claim's result (call.Result) is what the record carries whoever settles it, and what
		// the first call and every replay return.
		out.Result, out.Reason = call.Result, nil
		err = l.Commit(ctx, t, call.Result)
	case txstatus.Failed:
		out.Reason = cmp.Or(notOurs, l.rollbackReason(ctx, p.Status, gid, info, startErr))
		err = l.Rollback(ctx, t, out.Reason)
		if err == nil && t.Record.Status == idemkit.StatusRejected {
			// A permanent failure (a TCC try's idemkit.Permanent error): the shape a replay returns.
			err = &rejection{rej: &idemkit.RejectedError{Message: t.Record.Error}, cause: out.Reason}
		}
	case txstatus.Aborting:
		// Rolling back: no result, the reason as for Failed, and the record is left to the
		// Reconciler.
		out.Reason = cmp.Or(notOurs, l.rollbackReason(ctx, p.Status, gid, info, startErr))
		l.Detach(ctx, t)
	case txstatus.Prepared:
		// Not submitted: when its start failed (a TCC whose abort did not reach DTM), DTM aborts it
		// once it times out; Reason keeps the start's error. No result either way.
		l.Detach(ctx, t)
	default:
		out.Result = call.Result // stored with the claim: what a replay returns once it succeeds
		out.Reason = nil         // submitted and running: a lost answer to its submit is no reason
		l.Detach(ctx, t)
	}
	return l.ended(ctx, call, gid, out, err)
}

// AbortError is the error of a Start that failed for Reason (a TCC try's error) and whose abort — which
// gives the manager Reason as the transaction's rollback reason — was not acknowledged, with Err: the
// manager may never have received it, and then rolls the transaction back on its own later (its
// timeout), with a reason of its own. When the transaction rolls back, Run records it as Reason's,
// as it does when the abort got through: FAILED with Reason's message, or REJECTED when Reason is
// permanent — not the lost abort's message, nor the manager's timeout. It matches both Reason and Err.
type AbortError struct {
	// Reason is why the transaction was aborted.
	Reason error
	// Err is the abort's error.
	Err error
}

func (e *AbortError) Error() string   { return fmt.Sprintf("%v (and aborting: %v)", e.Reason, e.Err) }
func (e *AbortError) Unwrap() []error { return []error{e.Reason, e.Err} }

// startPanic is the value Start panicked with.
type startPanic struct{ value any }

// startOf calls start, and returns the panic it raised, if any, with an error standing for it: a
// start whose outcome is unknown (it may have reached the manager before it panicked), retryable.
func startOf(ctx context.Context, start func(context.Context, string) error, gid string) (panicked *startPanic, err error) {
	defer func() {
		if v := recover(); v != nil {
			panicked = &startPanic{value: v}
			err = idemkit.Retryable(fmt.Errorf("hooks: Start panicked: %v", v))
		}
	}()
	return nil, start(ctx, gid)
}

// neverStarted ends Run for a transaction that did not start: the record is rolled back with reason
// and the Outcome is Failed.
func (l *Lifecycle) neverStarted(ctx context.Context, t *Txn, call idemkit.Call, out Outcome, reason error) (Outcome, error) {
	out.Status, out.Reason = txstatus.Failed, reason
	return l.ended(ctx, call, t.GID, out, l.rollbackUnstarted(ctx, t, reason))
}

// rollbackUnstarted is Rollback for t, whose transaction never started. When its gid was chosen by the
// caller and the Rollback hook fails, the record is rolled back all the same, and the hook's error
// returned: left PROCESSING, the Reconciler would follow what the manager holds for the gid — maybe
// another transaction, whose success it would record as this call's, none of it run. (A fresh gid is
// left to the Reconciler, which fences it and runs the hook again.) A panic in the hook rolls the
// record back the same way before it goes on.
func (l *Lifecycle) rollbackUnstarted(ctx context.Context, t *Txn, reason error) error {
	if t.noHooks {
		return l.settle(ctx, t, nil, reason)
	}
	if !t.chosen || l.OnRollback == nil {
		return l.Rollback(ctx, t, reason)
	}
	panicked := true
	defer func() {
		if panicked {
			_ = l.settle(ctx, t, nil, reason)
		}
	}()
	err := l.OnRollback.Rollback(ctx, t.forHook(), reason)
	panicked = false
	if err != nil {
		if serr := l.settle(ctx, t, nil, reason); serr != nil {
			// The hook's error is the one to report, also when another settled the record first
			// (which Run's caller would otherwise be told is no error); the record was not rolled
			// back here, and the error must not say it was.
			return fmt.Errorf("hooks: rollback %s: %w; settling the record: %v", t.GID, err, serr)
		}
		return fmt.Errorf("hooks: rollback %s: %w (the record is rolled back all the same: its gid may be another transaction's)", t.GID, err)
	}
	return l.settle(ctx, t, nil, reason)
}

// ended is Run's return once the record was settled, or its settlement tried, with err: when the
// settlement was fenced — a Reconciler settled the record first (the wait outlived the claim's lease,
// or it fenced the gid while the start was on its way) — and the record agrees with the outcome, the
// outcome stands without error; a rejection the Reconciler recorded is returned as a replay returns it.
func (l *Lifecycle) ended(ctx context.Context, call idemkit.Call, gid string, out Outcome, err error) (Outcome, error) {
	if errors.Is(err, idemkit.ErrFenced) {
		if rec, ok := l.agrees(ctx, call, gid, out.Status); ok {
			if rec.Status == idemkit.StatusRejected {
				return out, &rejection{rej: &idemkit.RejectedError{Message: rec.Error}, cause: out.Reason}
			}
			return out, nil
		}
	}
	return out, err
}

// renew renews t's claim right before its transaction starts. It returns a rollback reason when it
// rolled the record back (the claim's lock ran out: nothing was started, the key is free again), or an
// error when the transaction must not start.
func (l *Lifecycle) renew(ctx context.Context, t *Txn, call idemkit.Call) (rolledBack, err error) {
	if t.claim == nil {
		return nil, nil
	}
	err = t.claim.Extend(ctx)
	if cerr := ctx.Err(); cerr != nil {
		// The caller left before the start (the renewal failed for that, not for the store): nothing
		// started and nothing will, so the record is rolled back, on a context that survives the
		// cancellation, and the key is free again — rather than left PROCESSING for a Reconciler to
		// fence a gid the manager never heard of.
		reason := idemkit.Retryable(fmt.Errorf("%w (never started): the caller left before the start: %w", ErrRolledBack, cerr))
		sctx, cancel := background.Settling(ctx)
		defer cancel()
		return reason, errors.Join(fmt.Errorf("hooks: %s not started: %w (the key is free again)", t.GID, cerr), l.rollbackUnstarted(sctx, t, reason))
	}
	switch {
	case err == nil:
		t.Record = t.claim.Record()
		return nil, nil
	case errors.Is(err, idemkit.ErrFenced):
		// Settled by another (a Reconciler that found the lease run out, and fenced the gid at DTM).
		l.Detach(ctx, t)
		err = fmt.Errorf("hooks: the claim of %s was settled by another before its start, which did not happen: %w", t.GID, err)
		if herr := l.rollbackFenced(ctx, t, call); herr != nil {
			err = errors.Join(err, fmt.Errorf("hooks: rollback %s: %w", t.GID, herr))
		}
		return nil, err
	case errors.Is(err, idemkit.ErrLockNotHeld):
		// A Locker that says the lock is not held (Extend renews a Begin claim's record when its lock
		// ran out, and returns ErrFenced when the record is no longer its own): nothing started, so
		// rolling it back is right either way; a fenced rollback means another settled it first.
		reason := idemkit.Retryable(fmt.Errorf("%w (never started): the claim's lock ran out before the start: %w", ErrRolledBack, err))
		return reason, l.rollbackUnstarted(ctx, t, reason)
	default:
		// The store cannot say: leave the record to the reconciler, which fences the gid.
		l.Detach(ctx, t)
		return nil, fmt.Errorf("hooks: renewing the claim of %s before its start: %w (nothing started; left to the reconciler)", t.GID, err)
	}
}

// rollbackFenced runs the Rollback hook for t, whose claim was settled by another before its start:
// its gid never started here, and never will. The other — a Reconciler that fenced the gid — ran the
// hook when it settled the record, maybe before the writes of a Before hook that outlived the lease
// existed, so the hook runs again (hooks are idempotent) and those writes follow the rollback too;
// also when the record no longer names this gid (a retry of the key took it over since, or it was
// deleted), which leaves the writes of this gid to nobody else. It does not run for a gid held by
// another transaction (t.noHooks), nor when the record says this gid succeeded: a transaction holding
// it ran, and its rows are not this call's to roll back.
func (l *Lifecycle) rollbackFenced(ctx context.Context, t *Txn, call idemkit.Call) error {
	if l.OnRollback == nil || t.noHooks {
		return nil
	}
	why := "settled by another before the start"
	rec, err := l.Guard.Get(ctx, call.Scope, call.Key)
	switch {
	case err == nil && rec.GID == t.GID && rec.Status == idemkit.StatusSucceeded:
		return nil
	case err == nil && rec.GID == t.GID:
		t.Record = *rec
		why += ": " + rec.Error
	case err == nil:
		why = "the key was settled by another before the start, then claimed again by another call"
	}
	return l.OnRollback.Rollback(ctx, t.forHook(), fmt.Errorf("%w (never started): %s", ErrRolledBack, why))
}

// startedElsewhere is the rollback reason of a start that DTM accepted onto another transaction holding
// gid, which it then reported (info): nothing of the transType started, see [txstatus.Info.RanNothingFor].
func startedElsewhere(gid, transType string, info txstatus.Info) error {
	return idemkit.Retryable(fmt.Errorf("%w (never started): DTM reports %s as a %s %s with %d branch operations, not the %s started with it: "+
		"the start landed on a transaction already holding the gid (a reconciler's fence) and nothing of it ran",
		ErrRolledBack, gid, cmp.Or(info.TransType, "transaction"), info.Status, info.Branches, cmp.Or(transType, "transaction")))
}

// rollbackReason says why gid rolled back: the initiator's own error when it is the reason — a
// permanent one (a TCC try's), or the one it gave DTM as the rollback reason, or meant to give it with
// an abort that was not acknowledged (an *AbortError's Reason) — returned as it is so
// that its identity and its classification survive; else DTM's rollback reason, the one a Reconciler
// records (a start error that is not the reason, such as a lost answer to a submit DTM accepted, is
// not reported); the initiator's error when DTM gives none; else just ErrRolledBack.
//
// info is what the manager last said of gid; it is asked again only when that is not a final status
// (the reason may come with it).
func (l *Lifecycle) rollbackReason(ctx context.Context, c *txstatus.Client, gid string, info txstatus.Info, startErr error) error {
	var lost *AbortError
	given := false // startErr is the reason the initiator gave, whatever the manager holds
	if errors.As(startErr, &lost) && lost.Reason != nil {
		// The abort that gives the manager the reason was not acknowledged, and the manager holds it,
		// its own (a timeout) or none: the rollback is the reason's, as it would be had the abort been
		// acknowledged — the try's message, not the lost abort's or the manager's timeout.
		startErr, given = lost.Reason, true
	}
	if startErr != nil && l.IsPermanent(startErr) {
		return fmt.Errorf("%w: %w", ErrRolledBack, startErr)
	}
	if !info.Status.Final() {
		if fresh, err := c.Query(ctx, gid); err == nil {
			info = fresh
		}
	}
	reason := info.RollbackReason
	switch {
	case startErr != nil && (reason == "" || given || givenAsReason(startErr, reason)):
		// Not permanent by the rule above: retryable, whatever Options.IsPermanent says of the wrapping.
		return idemkit.Retryable(fmt.Errorf("%w: %w", ErrRolledBack, startErr))
	case reason != "":
		return dtmRollbackReason(reason)
	}
	return rolledBack
}

// givenAsReason reports whether reason is the text of err or of an error it wraps: the error an
// initiator gave DTM as the rollback reason (a TCC try's), which its start may return wrapped (with
// a failed abort's error beside it).
func givenAsReason(err error, reason string) bool {
	for err != nil {
		if t := err.Error(); t == reason || PermanentReason+t == reason || cutFrom(t, reason) || cutFrom(PermanentReason+t, reason) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if givenAsReason(e, reason) {
					return true
				}
			}
			return false
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return false
		}
	}
	return false
}

// ReasonCut ends a rollback reason an initiator cut to fit DTM's rollback_reason column.
const ReasonCut = "…"

// cutFrom reports whether reason is text cut short by an initiator: a prefix of it followed by
// ReasonCut.
func cutFrom(text, reason string) bool {
	head, ok := strings.CutSuffix(reason, ReasonCut)
	return ok && len(head) < len(text) && strings.HasPrefix(strings.ToValidUTF8(text, "\uFFFD"), head)
}

// agrees returns the record of call when it carries gid and the final status st: a settle that was
// fenced because a Reconciler recorded the same outcome first.
func (l *Lifecycle) agrees(ctx context.Context, call idemkit.Call, gid string, st txstatus.Status) (*idemkit.Record, bool) {
	if l.Guard == nil || !st.Final() {
		return nil, false
	}
	rec, err := l.Guard.Get(ctx, call.Scope, call.Key)
	if err != nil || rec.GID != gid {
		return nil, false
	}
	if st == txstatus.Succeed {
		return rec, rec.Status == idemkit.StatusSucceeded
	}
	return rec, rec.Status == idemkit.StatusFailed || rec.Status == idemkit.StatusRejected
}

// Conclude applies a transaction status to t: Commit with result on Succeed, Rollback on Failed (with
// ErrRolledBack as the reason), Detach on anything else (still running).
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
