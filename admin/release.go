package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/ownedtx"
	"github.com/idemkit/idemkit/record"
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

// MaxBy bounds ReleaseOptions.By, in bytes.
const MaxBy = 512

// CheckBy returns an error when by cannot be ReleaseOptions.By: longer than MaxBy bytes, not valid
// UTF-8, or holding a NUL byte or a line break (the record's error column would refuse some, and the
// rest would garble listings).
func CheckBy(by string) error {
	switch {
	case len(by) > MaxBy:
		return fmt.Errorf("admin: release reason: %d bytes, at most %d", len(by), MaxBy)
	case !utf8.ValidString(by):
		return errors.New("admin: release reason: not valid UTF-8")
	case strings.ContainsAny(by, "\x00\r\n"):
		return errors.New("admin: release reason: holds a NUL byte or a line break")
	}
	return nil
}

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
	if err := CheckBy(opts.By); err != nil {
		return nil, err
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
	err := a.writeChecked(ctx, rec, !opts.Force, func(cur *idemkit.Record) error { return a.CanRelease(cur, opts) },
		func(st *record.Store) error { return st.Update(ctx, &next, rec.Version()) })
	if err != nil {
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
	// Force deletes a PROCESSING record whose lease has not run out or that carries a GID, and a
	// finished record an attempt may still be running or answering under (see [Admin.Purge]): a
	// duplicate may then run beside a running Mark-mode function, and with Redis the attempt may cache
	// the record again as it ends (delete it with [Admin.ForgetCached]). Defaults to false: such
	// records are refused with ErrRefused.
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
// carries a GID (its outcome belongs to the global transaction). It also refuses a finished record
// an attempt may still be running or answering under. Mark mode writes its record SUCCEEDED before
// its function runs: without Redis, nothing but that record keeps a duplicate from running beside the
// function, so a mark (SUCCEEDED, no lease) written less than Options.Lease ago is refused. With
// Redis, a SUCCEEDED or REJECTED record whose key Redis holds a lock on is refused: the holder (a Mark-mode
// function, or an attempt answering from the record) caches the record as it releases the lock, which
// would answer duplicates for a record that no longer exists. (An attempt that reads the record
// between that check and the delete can still cache it; purge --redis of the key then clears it.)
//
// The record's fence count goes with it: the next claim starts again at fence 1, which a stalled
// holder of a purged claim may exceed, so its fenced business writes (idemkit.FenceFromContext) are
// no longer outranked. Release a stuck claim ([Admin.Release]: fence + 1) while its holder may be
// alive; purge it once the holder is known gone.
func (a *Admin) Purge(ctx context.Context, rec *idemkit.Record, opts PurgeOptions) error {
	if rec == nil {
		return errors.New("admin: Purge: nil record")
	}
	if err := a.CanPurge(rec, opts); err != nil {
		return err
	}
	if a.lk != nil && !opts.Force && rec.Status.Terminal() { // only a finished record is ever cached
		if err := a.unlocked(ctx, rec); err != nil {
			return err
		}
	}
	err := a.writeChecked(ctx, rec, !opts.Force && rec.Status == idemkit.StatusProcessing, func(cur *idemkit.Record) error { return a.CanPurge(cur, opts) },
		func(st *record.Store) error { return st.Delete(ctx, rec.Scope, rec.Key, rec.Version()) })
	if err != nil {
		return err
	}
	if a.lk != nil {
		if err := a.forget(ctx, rec); err != nil {
			return fmt.Errorf("%w: the record was deleted, but its cached result could not be removed (it expires by itself): %w", ErrRedisCleanup, err)
		}
	}
	return nil
}

// CanPurge returns the ErrRefused error [Admin.Purge] would return for rec and opts, or nil, as far
// as the record tells: with Redis, Purge also asks Redis whether an attempt holds the key's lock.
func (a *Admin) CanPurge(rec *idemkit.Record, opts PurgeOptions) error {
	if opts.Force {
		return nil
	}
	now := a.opts.Now()
	switch {
	case rec.Status == idemkit.StatusProcessing && rec.GID != "":
		return fmt.Errorf("%w: a claim of global transaction %q: its outcome is the transaction's (idemctl dtm %s); purge only with force", ErrRefused, rec.GID, rec.GID)
	case rec.Status == idemkit.StatusProcessing && !rec.LeaseExpired(now):
		return fmt.Errorf("%w: a live claim (lease until %s): its holder may still be running; purge only with force", ErrRefused, rec.LeaseUntil.UTC().Format(time.RFC3339))
	case a.lk == nil && rec.IsMark() && now.Before(rec.UpdatedAt.Add(a.opts.Lease)):
		return fmt.Errorf("%w: a mark written %s ago, less than a lease (%s): in Mark mode its function may still be running, and without Redis nothing else keeps a duplicate from running beside it; wait until %s, or purge only with force",
			ErrRefused, now.Sub(rec.UpdatedAt).Round(time.Second), a.opts.Lease, rec.UpdatedAt.Add(a.opts.Lease).UTC().Format(time.RFC3339))
	}
	return nil
}

// writeChecked runs write, a fenced write of rec (conditioned on its version), on the record store.
// With check it first locks rec's row in a transaction (SELECT ... FOR UPDATE; on SQLite, which has
// no row locks, an UPDATE that changes nothing takes the database's write lock) and, if the row is
// still at rec's version, checks it again with can, then writes in that transaction: a renewal the
// holder wrote since rec was read (it moves the lease, not the version) is then seen and refused, and
// one that comes after waits for the write and finds the claim fenced. Without the lock, a release or
// purge confirmed by an operator minutes after the read could end a claim whose holder is alive.
func (a *Admin) writeChecked(ctx context.Context, rec *idemkit.Record, check bool, can func(*idemkit.Record) error, write func(*record.Store) error) error {
	if !check {
		return write(a.store)
	}
	for attempt := 0; ; attempt++ {
		err := a.checkedTx(ctx, rec, can, write)
		// A transaction the database rolled back on a write conflict runs again: on PostgreSQL
		// under REPEATABLE READ (default_transaction_isolation set by the DSN, the role or the
		// database) the row lock waited for a write committed meanwhile — the holder's finish, a
		// sweeper's recovery — and failed with a serialization failure; run again, it reads that
		// write and finds the record changed (ErrFenced). A deadlock victim likewise.
		if err == nil || !ownedtx.RunAgain(ctx, attempt, record.IsConflict(err)) {
			return err
		}
	}
}

// checkedTx is one run of writeChecked's transaction.
func (a *Admin) checkedTx(ctx context.Context, rec *idemkit.Record, can func(*idemkit.Record) error, write func(*record.Store) error) error {
	// On a connection of its own (package internal/ownedtx): one whose COMMIT failed with the
	// transaction left open (SQLite's SQLITE_BUSY, a Galera node without a primary component) is
	// rolled back on it or closed, never returned to the pool with the transaction open.
	return ownedtx.Transaction(ctx, a.db, func(tx *gorm.DB) error {
		if a.q.dialect == "sqlite" {
			// SQLite has no row locks: an UPDATE that changes nothing takes the database's write
			// lock, first, waiting for another connection's write transaction as the busy timeout
			// allows. A transaction that read first could not write once another connection held
			// or took that lock (SQLITE_BUSY at once, or SQLITE_BUSY_SNAPSHOT; the busy timeout does
			// not help): beside an application writing to the database, the release or purge failed.
			if err := tx.Exec("UPDATE "+a.q.table+" SET fence = fence WHERE scope = ? AND idem_key = ?", rec.Scope, rec.Key).Error; err != nil {
				return fmt.Errorf("admin: locking the database: %w", err)
			}
		} else {
			var fence int64
			if err := tx.Raw("SELECT fence FROM "+a.q.table+" WHERE scope = ? AND idem_key = ? FOR UPDATE", rec.Scope, rec.Key).Scan(&fence).Error; err != nil {
				return fmt.Errorf("admin: locking the record: %w", err)
			}
		}
		st := a.store.WithTx(tx)
		cur, err := st.Get(ctx, rec.Scope, rec.Key)
		if err == nil && cur.Version() == rec.Version() {
			if err := can(cur); err != nil {
				return err
			}
		} // changed or gone: the fenced write answers for it
		return write(st)
	})
}
