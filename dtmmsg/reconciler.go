package dtmmsg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/reconcile"
	"github.com/idemkit/idemkit/sweep"
	"github.com/idemkit/idemkit/txstatus"
)

// Reconciler settles the records of publications whose initiator died or stopped waiting. It only
// touches records whose gid starts with [GIDPrefix] (those Publish created); records of sagas and TCCs
// are left to hooks.Reconciler. For each it asks DTM: a message DTM reports succeeded (or submitted)
// committed its local transaction, whatever the barrier says by now (its row may have been swept by
// barrier.Gorm.DeleteOlder since); otherwise it runs the back-check (barrier.Gorm.QueryPrepared), which
// also fences a local transaction that has not committed yet:
//
//   - the local transaction did not commit: it never will, nothing is or will be published; the record
//     is rolled back (FAILED: a retry with the key publishes anew);
//   - it committed: the message is or will be published (DTM's own back-check submits it); the record
//     is committed (SUCCEEDED) once DTM reports the message succeeded, and left for a later pass before.
//     When DTM reports it failed, or has no record of it (its store lost it, or dropped it once
//     finished), the record is left PROCESSING and RunOnce returns an error naming it, for an operator.
//
// A record the Reconciler commits keeps the Result its publisher stored with the claim, so duplicates
// get the same answer whoever settled it. Run it with [Reconciler.Task] under a sweep.Sweeper (one
// instance at a time).
type Reconciler struct {
	// Lifecycle runs the hooks; its Guard keeps the records. Required, with a Guard (also with
	// Pending): RunOnce refuses one without.
	Lifecycle *hooks.Lifecycle
	// Barrier answers the back-check. Required.
	Barrier *barrier.Gorm
	// Scopes are the scopes the publisher's calls use: only those records of the Guard's namespace are
	// settled. Required unless Pending is set.
	Scopes []string
	// Pending lists the records to settle. Defaults to Lifecycle.Guard.Pending over Scopes.
	Pending hooks.Pending
	// Status asks DTM (txstatus.Client.Status).
	Status func(ctx context.Context, gid string) (txstatus.Status, error)
	// FenceWithin bounds the age of the claims (Record.CreatedAt) whose local transaction the
	// reconciler back-checks when DTM has no record of the message, or still holds it prepared (its own
	// back-check has not settled it): the back-check writes the row that keeps a late local transaction
	// from committing and rolls the record back when it finds none. For an older record finding none is
	// no evidence — the barrier sweeper (barrier.Gorm.DeleteOlder) may have deleted the row of a local
	// transaction that committed, and DTM forgotten the message it delivered (its Redis store drops a
	// finished transaction a day after it ended) — so such a record is reported (an error of RunOnce)
	// and left PROCESSING for an operator (idemctl release --force), as hooks.Reconciler does. Defaults to
	// hooks.DefaultFenceWithin (12h); keep it below the barrier rows' retention. Negative is refused.
	FenceWithin time.Duration
	// Logger receives a line per record that could not be settled. Defaults to discarding.
	Logger *slog.Logger
	// Observe, when set, is called once per message record looked at, as hooks.Reconciler.Observe
	// is (the same event: Status is DTM's answer, Settled set when this pass settled the record, Err
	// the error met; Fenced is never set: a message is back-checked, not fenced), e.g. to count in a
	// metric the records an operator must look at. It must not block.
	Observe func(ctx context.Context, e *hooks.ReconcileEvent)

	cursor reconcile.Cursor // where the next RunOnce goes on listing
}

// Task returns the reconciler as a sweep task named "reconcile-msg".
func (r *Reconciler) Task() sweep.Task { return sweep.Task{Name: "reconcile-msg", Run: r.RunOnce} }

// RunOnce settles up to limit pending records (others than messages' are skipped) and returns how
// many it settled. Records it cannot settle yet (the message not delivered, the back-check failing)
// and others than messages' are passed over, as hooks.Reconciler passes over running transactions:
// the listing goes on after the last record looked at, from one call to the next, up to 4 pages of
// limit records per call, and starts again from its head once it reached its end (a Pending of your
// own cannot page: every call lists one page from the head). Errors on single records (a panic in a
// hook among them, with its stack: the record stays as it was for a later pass) are joined and
// returned after the others were tried — except that once DTM failed to answer about 3 records in a
// row (unreachable, or hanging: each question waiting for its client's timeout) the call stops there
// and returns an error, and the next goes on after them.
func (r *Reconciler) RunOnce(ctx context.Context, now time.Time, limit int) (int, error) {
	var g *idemkit.Guard
	if r.Lifecycle != nil {
		g = r.Lifecycle.Guard
	}
	list, pageable := reconcile.Source(now, r.Pending, g, r.Scopes)
	if r.Lifecycle == nil || r.Barrier == nil || list == nil || r.Status == nil {
		return 0, errors.New("dtmmsg: Reconciler needs Lifecycle, Barrier, Status and Scopes (with a Lifecycle.Guard) or Pending")
	}
	if g == nil {
		// Without a Guard, Conclude writes no record: every listed record would have its hook run, be
		// reported settled and stay PROCESSING, listed again by the next pass.
		return 0, errors.New("dtmmsg: Reconciler needs a Lifecycle with a Guard, which keeps the records it settles")
	}
	if r.FenceWithin < 0 {
		return 0, fmt.Errorf("dtmmsg: Reconciler.FenceWithin %v is negative", r.FenceWithin)
	}
	var errs []error
	var silence reconcile.Silence // records in a row DTM did not answer about
	status := func(ctx context.Context, gid string) (txstatus.Status, error) {
		st, err := r.Status(ctx, gid)
		silence.Note(err == nil)
		return st, err
	}
	names := reconcile.ScopeNames(g, r.Scopes)
	settled, err := r.cursor.WalkUntil(ctx, list, pageable, limit, func(rec *idemkit.Record) (bool, bool) {
		if !strings.HasPrefix(rec.GID, GIDPrefix) {
			return false, false
		}
		ev := hooks.ReconcileEvent{Record: *rec, Scope: rec.Scope}
		if name, ok := names[rec.Scope]; ok {
			ev.Scope = name
		}
		if err := reconcile.Recovering(rec.GID, func() { r.settle(ctx, now, &ev, status) }); err != nil {
			ev.Settled, ev.Err = false, fmt.Errorf("dtmmsg: %w", err)
		}
		stop := false
		if ev.Err != nil {
			errs = append(errs, ev.Err)
			if r.Logger != nil {
				r.Logger.WarnContext(ctx, "dtmmsg: reconcile failed", "scope", rec.Scope, "gid", rec.GID, "error", ev.Err)
			}
			stop = silence.Stop() // the error is DTM's silence (a store's or a hook's leaves it at 0)
		}
		if r.Observe != nil {
			r.Observe(ctx, &ev)
		}
		if stop {
			// DTM is down or hangs: every other record would wait for the client's timeout in
			// turn, holding the sweeper's pass for hours. The next pass goes on after this one.
			errs = append(errs, silence.Err("dtmmsg", "DTM"))
		}
		return ev.Settled, stop
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("dtmmsg: listing pending records: %w", err))
	}
	return settled, errors.Join(errs...)
}

// settle brings one message record to its outcome, filling ev. status asks DTM (r.Status, counted by
// RunOnce).
func (r *Reconciler) settle(ctx context.Context, now time.Time, ev *hooks.ReconcileEvent, status func(context.Context, string) (txstatus.Status, error)) {
	rec := &ev.Record
	st, err := r.outcome(ctx, now, rec, status)
	ev.Status = st
	if err != nil {
		ev.Err = err
		return
	}
	if !st.Final() {
		return
	}
	t := &hooks.Txn{TransType: TransType, GID: rec.GID, Record: *rec}
	switch err := r.Lifecycle.Conclude(ctx, t, st, rec.Response); { // the result stored with the claim
	case err == nil:
		ev.Settled = true
	case errors.Is(err, idemkit.ErrFenced):
		// settled by its initiator meanwhile
	default:
		ev.Err = err
	}
}

// outcome is Failed when the local transaction did not commit (and now never will), DTM's status
// when it did. status asks DTM (r.Status, counted by RunOnce).
//
// DTM is asked first: a message it reports succeeded or submitted had its local transaction committed
// (DTM submits a message only after the commit — the publisher's submit, or a back-check that found
// it), whatever the barrier says by now — its row may have been swept since (barrier.Gorm.DeleteOlder),
// and the back-check would then take the local transaction for one that never committed. Otherwise
// the back-check decides, and fences a local transaction that has not committed yet.
func (r *Reconciler) outcome(ctx context.Context, now time.Time, rec *idemkit.Record, status func(context.Context, string) (txstatus.Status, error)) (txstatus.Status, error) {
	gid := rec.GID
	st, err := status(ctx, gid)
	if err == nil {
		err = unknownStatus(gid, st)
	}
	if err != nil {
		return txstatus.Unknown, err
	}
	if st == txstatus.Succeed || st == txstatus.Submitted {
		return st, nil
	}
	if within := cmp.Or(r.FenceWithin, hooks.DefaultFenceWithin); now.Sub(rec.CreatedAt) > within {
		// Too old for the back-check's answer to count: the barrier row of a local transaction that
		// committed may have been swept since.
		switch st {
		case txstatus.Unknown:
			return txstatus.Unknown, fmt.Errorf("dtmmsg: DTM has no record of message %s, claimed %v ago (more than FenceWithin, %v): "+
				"not back-checked, left PROCESSING — its local transaction may have committed and the message been delivered, "+
				"its barrier row swept since; the key answers in flight until an operator who knows it was not published releases it (idemctl release --force SCOPE KEY: release refuses a claim with a gid without it)",
				gid, now.Sub(rec.CreatedAt).Round(time.Second), within)
		case txstatus.Prepared:
			return txstatus.Unknown, fmt.Errorf("dtmmsg: DTM still holds message %s prepared, claimed %v ago (more than FenceWithin, %v): "+
				"its back-check has not settled it (can DTM reach the QueryPrepared URL?); not back-checked here, left PROCESSING — "+
				"its local transaction may have committed, its barrier row swept since",
				gid, now.Sub(rec.CreatedAt).Round(time.Second), within)
		}
	}
	switch err := r.Barrier.QueryPrepared(ctx, gid); {
	case errors.Is(err, barrier.ErrMsgRolledBack):
		return txstatus.Failed, nil
	case err != nil:
		return txstatus.Unknown, err
	}
	// Committed: ask DTM again, which may have heard of the message (its prepare, its submit) while the
	// back-check waited for the local transaction.
	if st, err = status(ctx, gid); err == nil {
		err = unknownStatus(gid, st)
	}
	if err != nil {
		return txstatus.Unknown, err
	}
	switch st {
	case txstatus.Failed:
		// Committed locally yet failed at DTM cannot happen for a message (its branches are retried
		// until they succeed); leave the record for an operator rather than free its key.
		return txstatus.Unknown, fmt.Errorf("dtmmsg: message %s committed locally but DTM reports it failed", gid)
	case txstatus.Unknown:
		// Prepared before the local transaction, so DTM knew it: it lost it (a store that does not
		// survive restarts) or dropped it once finished (DTM's Redis store, after FinishedDataExpire).
		// Whether it was delivered is unknown: leave the record for an operator, and say so.
		return txstatus.Unknown, fmt.Errorf("dtmmsg: message %s committed locally but DTM has no record of it (lost by its store, or expired after it finished): delivered or not, only an operator can tell", gid)
	}
	return st, nil
}

// unknownStatus returns an error when st, what Status reported of gid, is none of DTM's statuses nor
// Unknown (a Status function of the user's translating another API's): such a message is not taken
// for one still on its way, which nobody would ever hear of, nor back-checked.
func unknownStatus(gid string, st txstatus.Status) error {
	switch st {
	case txstatus.Unknown, txstatus.Prepared, txstatus.Submitted, txstatus.Aborting, txstatus.Succeed, txstatus.Failed:
		return nil
	}
	return fmt.Errorf("dtmmsg: DTM's status of message %s is reported as %q, which is none of the statuses the reconciler knows (prepared, submitted, succeed, failed): left PROCESSING", gid, st)
}
