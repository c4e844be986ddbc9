package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
)

// ReleaseOptions configure [Admin.Release].
type ReleaseOptions struct {
	// By says who released the claim; it is written into the record's error ("idemkit: claim released
	// by <By>"). Defaults to "an operator".
	By string
	// Force releases a claim whose lease has not run out (its holder may still be running: the work
	// may then run twice, once by the holder and once by the retry, and only the retry's outcome is
	// recorded) or that carries a GID (its outcome belongs to the global transaction). Defaults to
	// false: both are refused with ErrRefused.
	Force bool
	// TTL is the expiry given to the released record when it has none (a claim written with no
	// expiry), so the sweeper deletes it eventually. Defaults to idemkit.DefaultTTL.
	TTL time.Duration
}

// ReleasedError starts the error a released record gets.
const ReleasedError = "idemkit: claim released by "

// Release ends a stuck claim the way the sweeper recovers one: rec (as read with [Admin.Get] or
// [Admin.List]) becomes FAILED with fence + 1, no owner and an error saying who released it. Its
// holder can then no longer finish it (its fenced write fails with idemkit.ErrFenced) and the next
// attempt with the key runs again. The write is conditioned on rec's version (fence, owner, status):
// it returns idemkit.ErrFenced when the record changed since it was read, and writes nothing.
//
// It returns ErrRefused when rec is not PROCESSING, and — unless opts.Force — when its lease has not
// run out or it carries a GID. With a Redis client it then deletes the holder's lock, if the lock is
// still held by the record's owner, so the retry is not turned away as in flight. It returns the
// record as written.
func (a *Admin) Release(ctx context.Context, rec *idemkit.Record, opts ReleaseOptions) (*idemkit.Record, error) {
	if rec == nil {
		return nil, errors.New("admin: Release: nil record")
	}
	if err := a.CanRelease(rec, opts); err != nil {
		return nil, err
	}
	now := a.opts.Now()
	next := *rec
	next.Status = idemkit.StatusFailed
	next.Fence = rec.Fence + 1
	next.Owner = ""
	next.Error = ReleasedError + cmp.Or(opts.By, "an operator")
	next.UpdatedAt = now
	if next.ExpiresAt.IsZero() {
		next.ExpiresAt = now.Add(cmp.Or(opts.TTL, idemkit.DefaultTTL))
	}
	if err := a.store.Update(ctx, &next, rec.Version()); err != nil {
		return nil, err
	}
	if a.lk != nil {
		if err := a.releaseLock(ctx, rec); err != nil {
			return &next, fmt.Errorf("%w: the record was released, but its lock could not be removed (it expires by itself): %w", ErrRedisCleanup, err)
		}
	}
	return &next, nil
}

// CanRelease returns the ErrRefused error [Admin.Release] would return for rec and opts, or nil.
func (a *Admin) CanRelease(rec *idemkit.Record, opts ReleaseOptions) error {
	now := a.opts.Now()
	switch {
	case rec.Status != idemkit.StatusProcessing:
		return fmt.Errorf("%w: the record is %s, not a claim: only a PROCESSING record can be released (purge deletes a record)", ErrRefused, rec.Status)
	case rec.GID != "" && !opts.Force:
		return fmt.Errorf("%w: the claim belongs to global transaction %q: its outcome is the transaction's, settled by the hooks or the reconciler; look at the transaction first (idemctl dtm %s), release only with force", ErrRefused, rec.GID, rec.GID)
	case !rec.LeaseExpired(now) && !opts.Force:
		return fmt.Errorf("%w: the claim's lease runs until %s (%s from now): its holder may still be running; wait, or release with force (the work may then run twice)", ErrRefused,
			rec.LeaseUntil.UTC().Format(time.RFC3339), rec.LeaseUntil.Sub(now).Round(time.Second))
	}
	return nil
}

// PurgeOptions configure [Admin.Purge].
type PurgeOptions struct {
	// Force deletes a PROCESSING record whose lease has not run out or that carries a GID. Defaults to
	// false: such records are refused with ErrRefused.
	Force bool
}

// Purge deletes rec (as read with [Admin.Get] or [Admin.List]) if it is still at the version it was
// read at, and returns idemkit.ErrFenced otherwise (nothing is deleted). The key is new again: the
// next attempt runs. With a Redis client it also deletes the record's cached result and its
// holder's lock, so no replay comes from the cache afterwards; without one a cached result may be
// replayed until it expires (idemkit.Options.CacheTTL).
//
// Unless opts.Force it refuses (ErrRefused) a PROCESSING record whose lease has not run out (its
// holder may be running: its finish would then fail, and a retry could run beside it) or that
// carries a GID (its outcome belongs to the global transaction).
func (a *Admin) Purge(ctx context.Context, rec *idemkit.Record, opts PurgeOptions) error {
	if rec == nil {
		return errors.New("admin: Purge: nil record")
	}
	if err := a.CanPurge(rec, opts); err != nil {
		return err
	}
	if err := a.store.Delete(ctx, rec.Scope, rec.Key, rec.Version()); err != nil {
		return err
	}
	if a.lk != nil {
		if err := a.forget(ctx, rec); err != nil {
			return fmt.Errorf("%w: the record was deleted, but its cached result could not be removed (it expires by itself): %w", ErrRedisCleanup, err)
		}
	}
	return nil
}

// CanPurge returns the ErrRefused error [Admin.Purge] would return for rec and opts, or nil.
func (a *Admin) CanPurge(rec *idemkit.Record, opts PurgeOptions) error {
	if rec.Status != idemkit.StatusProcessing || opts.Force {
		return nil
	}
	switch {
	case rec.GID != "":
		return fmt.Errorf("%w: a claim of global transaction %q: its outcome is the transaction's (idemctl dtm %s); purge only with force", ErrRefused, rec.GID, rec.GID)
	case !rec.LeaseExpired(a.opts.Now()):
		return fmt.Errorf("%w: a live claim (lease until %s): its holder may still be running; purge only with force", ErrRefused, rec.LeaseUntil.UTC().Format(time.RFC3339))
	}
	return nil
}
