package hooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/sweep"
	"github.com/idemkit/idemkit/txstatus"
)

// Pending lists PROCESSING records that carry a gid and whose lease ran out before now, at most limit
// (record.Store.Pending implements it).
type Pending func(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error)

// StatusFunc reports a global transaction's status (txstatus.Client.Status implements it).
type StatusFunc func(ctx context.Context, gid string) (txstatus.Status, error)

// Reconciler settles records whose initiator could not: for each pending record it asks the transaction
// manager and runs the Lifecycle's Commit (succeed) or Rollback (failed, or a gid the server never
// heard of); prepared, submitted and aborting transactions are left for a later pass. Run it with
// [Reconciler.Task] under a sweep.Sweeper, which bounds batches and keeps it to one instance at a time.
type Reconciler struct {
	// Lifecycle runs the hooks; its Guard keeps the records. Required.
	Lifecycle *Lifecycle
	// Scopes are the scopes of the calls this Lifecycle's transactions were started with
	// ([idemkit.Call.Scope]): the reconciler lists and settles only those records of its Guard's
	// namespace, never another application's or another Lifecycle's. Required unless Pending is set.
	Scopes []string
	// Pending lists the records to settle. Defaults to Lifecycle.Guard.Pending over Scopes.
	Pending Pending
	// Status asks the transaction manager. Required.
	Status StatusFunc
	// TransType is reported in the Txn passed to hooks. Defaults to "".
	TransType string
	// Logger receives one line per record it could not settle. Defaults to discarding.
	Logger *slog.Logger
}

// Task returns the reconciler as a sweep task named "reconcile".
func (r *Reconciler) Task() sweep.Task { return sweep.Task{Name: "reconcile", Run: r.RunOnce} }

// RunOnce settles up to limit pending records and returns how many it settled. Records whose
// transaction is still running are not counted; errors on single records are joined and returned after
// the others were tried.
func (r *Reconciler) RunOnce(ctx context.Context, now time.Time, limit int) (int, error) {
	pending := r.Pending
	if pending == nil && r.Lifecycle != nil && r.Lifecycle.Guard != nil && len(r.Scopes) > 0 {
		pending = func(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error) {
			return r.Lifecycle.Guard.Pending(ctx, now, limit, r.Scopes...)
		}
	}
	if r.Lifecycle == nil || pending == nil || r.Status == nil {
		return 0, errors.New("hooks: Reconciler needs Lifecycle, Status and Scopes (with a Lifecycle.Guard) or Pending")
	}
	recs, err := pending(ctx, now, limit)
	if err != nil {
		return 0, fmt.Errorf("hooks: listing pending records: %w", err)
	}
	settled := 0
	var errs []error
	for _, rec := range recs {
		st, err := r.Status(ctx, rec.GID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !st.Final() && st != txstatus.Unknown {
			continue // still running: a later pass will see its outcome
		}
		if st == txstatus.Unknown {
			st = txstatus.Failed // the manager never heard of it: it never started
		}
		t := &Txn{TransType: r.TransType, GID: rec.GID, Record: *rec}
		err = r.Lifecycle.Conclude(ctx, t, st, nil)
		switch {
		case err == nil:
			settled++
		case errors.Is(err, idemkit.ErrFenced):
			// settled by its initiator meanwhile
		default:
			errs = append(errs, err)
			if r.Logger != nil {
				r.Logger.WarnContext(ctx, "idemkit reconcile failed", "gid", rec.GID, "error", err)
			}
		}
	}
	return settled, errors.Join(errs...)
}
