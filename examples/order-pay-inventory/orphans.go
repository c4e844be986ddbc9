package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/sweep"
	"github.com/idemkit/idemkit/txstatus"
)

// orphanTask is the sweeper task that settles the orders no record settles any more: an order PENDING
// for longer than after whose gid is on no PROCESSING record. The initiator's record of an order is
// PROCESSING from before the order is inserted until its Commit or Rollback hook ran, or is left so
// (detached) for the Reconciler when a hook fails — with one exception, documented by package hooks:
// when a transaction with a gid chosen up front never started and the Rollback hook fails (the orders
// table busy), the record is rolled back all the same (the gid might be another transaction's, whose
// outcome the Reconciler would take for this call's) and the client gets 503. Nothing else would ever
// run the order's Rollback hook again; this task does, following what DTM holds for the gid: a gid DTM
// never heard of is fenced first (so it can never start), then the order follows the transaction's
// outcome through the same idempotent settle as the hooks.
func (o *orders) orphanTask(status *txstatus.Client, after time.Duration) sweep.Task {
	return sweep.Task{Name: "orphan_orders", Run: func(ctx context.Context, now time.Time, limit int) (int, error) {
		return o.settleOrphans(ctx, status, now, now.Add(-after), limit)
	}}
}

// settleOrphans settles up to limit orders PENDING since before whose record no longer follows them.
func (o *orders) settleOrphans(ctx context.Context, status *txstatus.Client, now, before time.Time, limit int) (int, error) {
	var pending []struct {
		ID        string    `gorm:"column:id"`
		GID       string    `gorm:"column:gid"`
		CreatedAt time.Time `gorm:"column:created_at"`
	}
	// The record is claimed with the gid before the order is inserted, so a PROCESSING record with it
	// is there as long as an initiator or the Reconciler may still settle the order: those are left
	// to them (and, skipped here, never crowd the others out of the batch).
	err := o.db.db.WithContext(ctx).Raw("SELECT o.id, o.gid, o.created_at FROM "+o.table+" o WHERE o.status = ? AND o.created_at < ?"+
		" AND NOT EXISTS (SELECT 1 FROM "+o.db.tables.records+" r WHERE r.status = ? AND r.gid = o.gid) ORDER BY o.created_at LIMIT ?",
		statusPending, before.UTC(), string(idemkit.StatusProcessing), limit).Scan(&pending).Error
	if err != nil {
		return 0, fmt.Errorf("listing pending orders: %w", err)
	}
	settled := 0
	var errs []error
	for _, p := range pending {
		ok, err := o.settleOrphan(ctx, status, now, p.ID, p.GID, p.CreatedAt)
		if err != nil {
			errs = append(errs, fmt.Errorf("order %s (gid %s): %w", p.ID, p.GID, err))
		}
		if ok {
			settled++
		}
	}
	return settled, errors.Join(errs...)
}

// settleOrphan settles the PENDING order id of gid, created at created, on which no PROCESSING record
// carries gid, from DTM's status for gid. It reports whether it did.
func (o *orders) settleOrphan(ctx context.Context, status *txstatus.Client, now time.Time, id, gid string, created time.Time) (bool, error) {
	info, err := status.Query(ctx, gid)
	if err != nil {
		return false, fmt.Errorf("asking DTM: %w", err)
	}
	if info.Status == txstatus.Unknown {
		if age := now.Sub(created); age > hooks.DefaultFenceWithin {
			// As the Reconciler: DTM may have forgotten a transaction that ran. An operator decides.
			o.logger.ErrorContext(ctx, "pending order DTM has no record of, too old to fence: left PENDING", "order_id", id, "gid", gid, "created", created)
			return false, fmt.Errorf("DTM has no record of it, created %v ago: not fenced, left PENDING", age.Round(time.Second))
		}
		if info, err = status.Fence(ctx, gid); err != nil {
			return false, err
		}
		o.logger.WarnContext(ctx, "pending order whose transaction never started: fenced its gid", "order_id", id, "gid", gid, "status", string(info.Status))
	}
	var to string
	switch {
	case info.Status == txstatus.Succeed && info.RanNothingFor(""):
		to = statusFailed // a late start landed on the fence: nothing of the order ran
	case info.Status == txstatus.Succeed:
		to = statusPaid
	case info.Status == txstatus.Failed:
		to = statusFailed
	default:
		return false, nil // still running: a later pass sees its outcome
	}
	if err := o.settle(ctx, gid, to); err != nil {
		return false, err
	}
	return true, nil
}
