package hooks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/reconcile"
	"github.com/idemkit/idemkit/sweep"
	"github.com/idemkit/idemkit/txstatus"
)

// Pending lists PROCESSING records that carry a gid and whose lease ran out before now, at most limit.
type Pending func(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error)

// Manager is what a Reconciler asks of the transaction manager. *txstatus.Client implements it.
// Implementations must be safe for concurrent use.
type Manager interface {
	// Query reports a global transaction's status and rollback reason (Status Unknown when the
	// manager has no transaction with gid). A status that is none of txstatus's is reported as the
	// record's error, which is left PROCESSING.
	Query(ctx context.Context, gid string) (txstatus.Info, error)
	// Fence makes sure gid can no longer start and reports its status afterwards (see
	// txstatus.Client.Fence). Implementations should report the stored TransType and Branches, as
	// txstatus.Client does: a Succeed without them is taken as the initiator's own.
	Fence(ctx context.Context, gid string) (txstatus.Info, error)
}

// ReconcileEvent describes one record a Reconciler looked at, for Reconciler.Observe.
type ReconcileEvent struct {
	// Record is the record as listed.
	Record idemkit.Record
	// Scope is the record's scope as the Reconciler's Scopes name it (without the Guard's namespace),
	// or the stored scope when the Reconciler lists records through Pending.
	Scope string
	// Status is the manager's answer about the record's gid (after the fence, when Fenced); Failed
	// when it answered Succeed for a transaction that is not the initiator's, which ran nothing of it
	// (see txstatus.Info.RanNothingFor) and whose record was rolled back.
	Status txstatus.Status
	// Fenced is set when the manager had no record of the gid: the reconciler fenced it (see
	// txstatus.Client.Fence) before following its status. Either the initiator died or lost its
	// start before the transaction reached the manager, or the manager lost a transaction it had
	// accepted (a store without persistence): the reconciler logs it at error level.
	Fenced bool
	// Settled is set when the record was settled (SUCCEEDED or FAILED) by this pass.
	Settled bool
	// Err is the error met, if any (an unreachable manager, a failing hook, the store).
	Err error
}

// Reconciler settles records whose initiator could not: for each pending record it asks the transaction
// manager and runs the Lifecycle's Commit (succeed) or Rollback (failed); prepared, submitted and
// aborting transactions are left for a later pass.
//
// A gid the manager has never heard of is not taken for a failure as such: the initiator may be slow,
// not dead, with its start still on the way. The reconciler first fences the gid at the manager
// ([Manager.Fence]: DTM then refuses any later start of it), then follows the status the manager
// reports — Failed once fenced, so the record is rolled back with the reason. Because a transaction the
// manager accepted and then lost looks the same, every fence is logged at error level and reported to
// Observe. A late saga submit landing between the fence's two calls is accepted by DTM onto the fence's
// empty transaction, which then reports succeed with none of the saga's steps run: the reconciler does
// not take that for a success but rolls the record back (see [txstatus.Info.RanNothingFor]; set
// TransType so it can tell precisely — without it any transaction that succeeded with no branch is
// taken for one that ran nothing).
//
// Records of 2-phase messages (their gid starts with dtmmsg.GIDPrefix) are passed over and left to
// dtmmsg.Reconciler, which leaves those of sagas and TCCs to this one: both may run over the same
// Scopes. A message is not a saga or a TCC: its outcome depends on the back-check of its local
// transaction, and a fence aborts a prepared message without asking it.
//
// Run it with [Reconciler.Task] under a sweep.Sweeper, which bounds batches and keeps it to one
// instance at a time. A Reconciler settles only the records of its own Lifecycle: its Guard's namespace
// and its Scopes; give each application, and each Lifecycle with hooks of its own, a Reconciler with its
// own Scopes and Manager.
type Reconciler struct {
	// Lifecycle runs the hooks; its Guard keeps the records. Required, with a Guard (also with
	// Pending): RunOnce refuses one without.
	Lifecycle *Lifecycle
	// Scopes are the scopes of the calls this Lifecycle's transactions were started with
	// ([idemkit.Call.Scope]): the reconciler lists and settles only those records of its Guard's
	// namespace, never another application's or another Lifecycle's. Required unless Pending is set.
	Scopes []string
	// Pending lists the records to settle. Defaults to Lifecycle.Guard.Pending over Scopes.
	Pending Pending
	// Manager is the transaction manager this Lifecycle's transactions run on, e.g.
	// &txstatus.Client{Server: dtmURL}. Required.
	Manager Manager
	// TransType is the type of the transactions this Lifecycle starts ("saga" or "tcc"), reported in
	// the Txn passed to hooks and used to tell the initiator's transaction from one that holds its gid
	// (see [txstatus.Info.RanNothingFor]). Defaults to "": unknown, and a transaction DTM reports
	// succeeded with no branch operation is then rolled back as one that ran nothing. Leave it empty
	// when Scopes hold records of both types (one Lifecycle shared by a saga.Initiator and a
	// tcc.Global): set to one type, the Reconciler takes every succeeded transaction of the other type
	// for one that is not the initiator's and rolls its record back, and the key's retry runs the
	// business again.
	TransType string
	// FenceWithin bounds the age of the claims whose gid the reconciler fences when the manager has
	// no record of it: a record claimed longer ago than this (Record.CreatedAt) is not fenced but
	// reported (ReconcileEvent.Err, logged at error level) and left PROCESSING for an operator,
	// because the manager may have forgotten a transaction that ran — DTM's Redis store drops a
	// finished transaction FinishedDataExpire (a day by default) after it ended, boltdb those older
	// than DataExpire (7 days) when it starts — and rolling that record back would let the key's next
	// call run the business again. Defaults to DefaultFenceWithin (12h), below DTM's shortest default
	// retention; lower it if your DTM forgets sooner, raise it if its store keeps everything (SQL).
	// Negative is refused.
	FenceWithin time.Duration
	// Logger receives one line per record it could not settle (warning) and per gid it had to fence
	// (error). Defaults to discarding.
	Logger *slog.Logger
	// Observe, when set, is called once per record looked at, e.g. to count fences in a metric. It
	// must be safe for concurrent use and return quickly.
	Observe func(ctx context.Context, e *ReconcileEvent)

	cursor reconcile.Cursor // where the next RunOnce goes on listing
}

// DefaultFenceWithin is Reconciler.FenceWithin's default.
const DefaultFenceWithin = 12 * time.Hour

// Task returns the reconciler as a sweep task named "reconcile".
func (r *Reconciler) Task() sweep.Task { return sweep.Task{Name: "reconcile", Run: r.RunOnce} }

// RunOnce settles up to limit pending records and returns how many it settled. Records whose
// transaction is still running are not counted, and are passed over: they keep their lapsed lease, so
// they stay at the head of the listing, and a batch of them would otherwise hide, pass after pass, the
// newer records whose transaction ended. The listing goes on after the last record looked at, from one
// call to the next, for up to 4 pages of limit records per call, and starts again from its
// head once it reached its end. A Pending of your own cannot page: every call then lists one page from
// the head. Errors on single records — a panic in a hook among them, with its stack: the record stays
// as it was for a later pass — are joined and returned after the others were tried — except
// that once the Manager failed to answer about 3 records in a row (unreachable, or hanging: each
// question waiting for its client's timeout) the call stops there and returns an error, and the next
// goes on after them.
func (r *Reconciler) RunOnce(ctx context.Context, now time.Time, limit int) (int, error) {
	var g *idemkit.Guard
	if r.Lifecycle != nil {
		g = r.Lifecycle.Guard
	}
	list, pageable := reconcile.Source(now, r.Pending, g, r.Scopes)
	if r.Lifecycle == nil || list == nil || r.Manager == nil {
		return 0, errors.New("hooks: Reconciler needs Lifecycle, Manager and Scopes (with a Lifecycle.Guard) or Pending")
	}
	if g == nil {
		// Without a Guard, Commit and Rollback write no record: every listed record would have its
		// hook run, be reported settled and stay PROCESSING, listed again by the next pass.
		return 0, errors.New("hooks: Reconciler needs a Lifecycle with a Guard, which keeps the records it settles")
	}
	if r.FenceWithin < 0 {
		return 0, fmt.Errorf("hooks: Reconciler.FenceWithin %v is negative", r.FenceWithin)
	}
	names := reconcile.ScopeNames(g, r.Scopes)
	var errs []error
	var silence reconcile.Silence // records in a row the manager did not answer about
	settled, err := r.cursor.WalkUntil(ctx, list, pageable, limit, func(rec *idemkit.Record) (bool, bool) {
		if strings.HasPrefix(rec.GID, msgGIDPrefix) {
			return false, false // a 2-phase message's: dtmmsg.Reconciler settles it
		}
		ev := ReconcileEvent{Record: *rec, Scope: rec.Scope}
		if name, ok := names[rec.Scope]; ok {
			ev.Scope = name
		}
		var answered bool
		if err := reconcile.Recovering(rec.GID, func() { answered = r.settle(ctx, now, &ev) }); err != nil {
			ev.Settled, ev.Err, answered = false, fmt.Errorf("hooks: %w", err), true // not the manager's silence
		}
		stop := silence.Note(answered)
		if ev.Err != nil {
			errs = append(errs, ev.Err)
			if r.Logger != nil {
				r.Logger.WarnContext(ctx, "idemkit reconcile failed", "scope", rec.Scope, "gid", rec.GID, "error", ev.Err)
			}
		}
		if r.Observe != nil {
			r.Observe(ctx, &ev)
		}
		if stop {
			// The manager is down or hangs: every other record would wait for the client's timeout
			// in turn, holding the sweeper's pass for hours. The next pass goes on after this one.
			errs = append(errs, silence.Err("hooks", "the transaction manager"))
			return ev.Settled, true
		}
		return ev.Settled, false
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("hooks: listing pending records: %w", err))
	}
	return settled, errors.Join(errs...)
}

// settle brings one record to its transaction's outcome, filling ev. It reports whether the manager
// answered what it was asked (false: the query or the fence failed).
func (r *Reconciler) settle(ctx context.Context, now time.Time, ev *ReconcileEvent) (answered bool) {
	rec := &ev.Record
	info, err := r.Manager.Query(ctx, rec.GID)
	if err != nil {
		ev.Err = fmt.Errorf("hooks: asking about %s: %w", rec.GID, err)
		return false
	}
	if info.Status == txstatus.Unknown {
		if within := cmp.Or(r.FenceWithin, DefaultFenceWithin); now.Sub(rec.CreatedAt) > within {
			// Too old for a start still on its way, and old enough for the manager to have forgotten
			// a transaction that ran: failing it could run the business twice. An operator decides.
			ev.Err = fmt.Errorf("hooks: the transaction manager has no record of %s, claimed %v ago (more than FenceWithin, %v): "+
				"not fenced, left PROCESSING — it may have forgotten a finished transaction (DTM's Redis store drops one a day after it "+
				"ends); the key answers in flight until an operator who knows the transaction did not run releases it (idemctl release --force SCOPE KEY: release refuses a claim with a gid without it)",
				rec.GID, now.Sub(rec.CreatedAt).Round(time.Second), within)
			if r.Logger != nil {
				r.Logger.ErrorContext(ctx, "idemkit reconcile: not fencing an old pending transaction the manager has no record of",
					"scope", rec.Scope, "gid", rec.GID, "claimed", rec.CreatedAt, "error", ev.Err)
			}
			return true
		}
		// Never heard of: the start may still be on its way. Make it impossible before concluding.
		if info, err = r.Manager.Fence(ctx, rec.GID); err != nil {
			ev.Err = fmt.Errorf("hooks: fencing %s: %w", rec.GID, err)
			return false
		}
		ev.Fenced = true
		if r.Logger != nil {
			r.Logger.ErrorContext(ctx, "idemkit reconcile: the transaction manager had no record of a pending transaction; "+
				"fenced its gid so it can never start, and following it: either its initiator died or lost its start before "+
				"the manager heard of it, or the manager lost a transaction it had accepted (is its store persistent?)",
				"scope", rec.Scope, "gid", rec.GID, "status", string(info.Status), "claimed", rec.CreatedAt)
		}
	}
	ev.Status = info.Status
	t := &Txn{TransType: r.TransType, GID: rec.GID, Record: *rec}
	switch {
	case info.Status == txstatus.Succeed && info.RanNothingFor(r.TransType):
		// The initiator's late start landed on the fence between its prepare and its abort, and DTM
		// "succeeded" the fence's empty transaction: nothing the initiator asked for ran.
		ev.Status = txstatus.Failed
		err = r.Lifecycle.Rollback(ctx, t, startedElsewhere(rec.GID, r.TransType, info))
	case info.Status == txstatus.Succeed:
		err = r.Lifecycle.Commit(ctx, t, rec.Response) // the result stored with the claim
	case info.Status == txstatus.Failed:
		err = r.Lifecycle.Rollback(ctx, t, dtmRollbackReason(info.RollbackReason))
	case info.Status == txstatus.Prepared || info.Status == txstatus.Submitted || info.Status == txstatus.Aborting:
		return true // still running: a later pass will see its outcome
	default:
		// None of DTM's statuses (a Manager of the user's translating another API's, or Unknown
		// after its fence): not taken for a running transaction, which nobody would ever hear of.
		ev.Err = fmt.Errorf("hooks: the transaction manager reports %s as %q, which is none of the statuses the reconciler knows (prepared, submitted, aborting, succeed, failed): left PROCESSING",
			rec.GID, info.Status)
		return true
	}
	switch {
	case err == nil:
		ev.Settled = true
	case errors.Is(err, idemkit.ErrFenced):
		// settled by its initiator meanwhile
	default:
		ev.Err = err
	}
	return true
}

// msgGIDPrefix starts the gid of every message dtmmsg.Publisher publishes (dtmmsg.GIDPrefix, which
// imports this package).
const msgGIDPrefix = "msg-"

// PermanentReason starts the rollback reason an initiator gives DTM when it aborts a transaction because
// of a permanent error ([Lifecycle.IsPermanent]: a TCC try's): a Reconciler that settles the record
// later finds it in DTM's rollback reason and records the key REJECTED (the reason is marked
// idemkit.Permanent, which every Guard honours), as the initiator would have.
const PermanentReason = "idemkit: permanent: "

// dtmRollbackReason is the rollback reason recorded for a transaction DTM reports failed with reason.
func dtmRollbackReason(reason string) error {
	switch {
	case reason == "":
		return rolledBack
	case strings.HasPrefix(reason, PermanentReason):
		return fmt.Errorf("%w: %w", ErrRolledBack, idemkit.Permanent(errors.New(strings.TrimPrefix(reason, PermanentReason))))
	default:
		return idemkit.Retryable(fmt.Errorf("%w: %s", ErrRolledBack, reason))
	}
}
