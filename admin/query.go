package admin

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemotel"
)

// Entry is a record as listed: every field but the result, of which only the size is read.
type Entry struct {
	idemkit.Record // Response is nil; Scope is as stored (see Admin.DisplayScope)
	// ResponseSize is the stored result's size in bytes.
	ResponseSize int64
}

// Filter selects records. The zero value selects every record of the Admin's namespace.
type Filter struct {
	// Scope is a scope as in idemkit.Call (namespace applied by the Admin). Default: every scope.
	Scope string
	// Status selects one state. Default: every state.
	Status idemkit.Status
	// Stuck selects PROCESSING records whose lease ran out (with or without a GID).
	Stuck bool
	// OlderThan selects records last written (updated_at) at least that long ago.
	OlderThan time.Duration
	// GID selects the records tied to one global transaction. This column has no index: the
	// database scans the table (or the scope).
	GID string
	// Limit bounds how many records List returns; below 1, DefaultLimit.
	Limit int
	// Progress, when set, is called after each page with the number of records read so far.
	Progress func(read int)
}

// Defaults of the listing functions.
const (
	DefaultLimit = 100
	pageSize     = 500
)

// where builds the conditions of f at now; it fails with ErrInvalidKey on a malformed scope and
// ErrUnknownScope on a scope no record has.
func (a *Admin) where(ctx context.Context, f *Filter, now time.Time) (where, error) {
	var w where
	if f.Scope != "" {
		stored, err := a.StoredScope(f.Scope)
		if err != nil {
			return w, fmt.Errorf("scope: %w", err)
		}
		err = a.requireScope(ctx, stored, f.Scope)
		if errors.Is(err, ErrUnknownScope) && idemkit.IsHashedForm(f.Scope) {
			// The hashed stored form listings show of a long scope is taken as it is, as Get
			// takes it (no literal scope is stored so: one starting with "sha256:" is hashed).
			stored = f.Scope
			err = a.requireScope(ctx, stored, f.Scope)
		}
		if err != nil {
			return w, err
		}
		w.add("scope = ?", stored)
	} else if a.ns != "" {
		a.q.namespace(&w, a.ns)
	}
	if f.Status != "" {
		if !f.Status.Valid() {
			return w, fmt.Errorf("admin: unknown status %q (want PROCESSING, SUCCEEDED, FAILED or REJECTED)", f.Status)
		}
		w.add("status = ?", string(f.Status))
		w.status = string(f.Status)
	}
	if f.Stuck {
		w.add(condStuck, millis(now))
		w.status = cmp.Or(w.status, string(idemkit.StatusProcessing))
	}
	if f.OlderThan < 0 {
		return w, fmt.Errorf("admin: negative age %s", f.OlderThan)
	}
	if f.OlderThan > 0 {
		w.add("updated_at <= ?", millis(now.Add(-f.OlderThan)))
	}
	if f.GID != "" {
		if err := CheckGID(f.GID); err != nil {
			return w, err
		}
		a.q.gid(&w, f.GID)
	}
	return w, nil
}

// CheckGID returns an error when no record can carry gid, as a Guard refuses such a call's GID (see
// idemkit.StorableText): longer than idemkit.MaxStoredLen bytes, not valid UTF-8, or holding a NUL
// byte. A filter on such a gid is a mistake (a mangled argument), and PostgreSQL refuses the query.
func CheckGID(gid string) error {
	switch {
	case len(gid) > idemkit.MaxStoredLen:
		return fmt.Errorf("admin: gid: %d bytes, longer than %d: no record carries such a gid", len(gid), idemkit.MaxStoredLen)
	case !utf8.ValidString(gid):
		return errors.New("admin: gid: not valid UTF-8: no record carries such a gid")
	case strings.IndexByte(gid, 0) >= 0:
		return errors.New("admin: gid: holds a NUL byte: no record carries such a gid")
	}
	return nil
}

// List returns up to f.Limit records matching f, reading them in pages of 500 (keyset pagination).
// A listing of one state (f.Status, or f.Stuck) follows the table's (status, expires_at) index: its
// records come by expiry, then (scope, key), and a page reads only its own rows however large the
// table. Other listings come in (scope, key) order, the primary key's. Errors: ErrInvalidKey or
// ErrUnknownScope for f.Scope, an unknown status, the database's.
func (a *Admin) List(ctx context.Context, f Filter) ([]*Entry, error) {
	now := a.opts.Now()
	w, err := a.where(ctx, &f, now)
	if err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit < 1 {
		limit = DefaultLimit
	}
	var out []*Entry
	var last *Entry
	for len(out) < limit {
		n := min(pageSize, limit-len(out))
		query, args := a.q.page(w, last, n)
		page, err := a.entries(ctx, query, args)
		if err != nil {
			return out, err
		}
		out = append(out, page...)
		if f.Progress != nil {
			f.Progress(len(out))
		}
		if len(page) < n {
			break
		}
		last = page[len(page)-1]
	}
	return out, nil
}

// Count returns how many records match f (f.Limit is ignored).
func (a *Admin) Count(ctx context.Context, f Filter) (int64, error) {
	w, err := a.where(ctx, &f, a.opts.Now())
	if err != nil {
		return 0, err
	}
	query, args := a.q.count(w)
	return a.count(ctx, query, args)
}

func (a *Admin) count(ctx context.Context, query string, args []any) (int64, error) {
	var n int64
	rows, err := a.db.WithContext(ctx).Raw(query, args...).Rows()
	if err != nil {
		return 0, fmt.Errorf("admin: counting records of %s: %w", a.Table(), err)
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, fmt.Errorf("admin: counting records of %s: %w", a.Table(), err)
		}
	}
	return n, rows.Err()
}

// entries runs a query selecting entryColumns.
func (a *Admin) entries(ctx context.Context, query string, args []any) ([]*Entry, error) {
	rows, err := a.db.WithContext(ctx).Raw(query, args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("admin: reading %s: %w", a.Table(), err)
	}
	defer rows.Close()
	var out []*Entry
	for rows.Next() {
		e := new(Entry)
		var status string
		var size sql.NullInt64
		var lease, expires, created, updated int64
		if err := rows.Scan(&e.Scope, &e.Key, &status, &e.Fence, &e.Owner, &e.Fingerprint, &e.GID, &e.BranchID,
			&size, &e.Error, &lease, &expires, &created, &updated); err != nil {
			return nil, fmt.Errorf("admin: reading %s: %w", a.Table(), err)
		}
		e.Status = idemkit.Status(status)
		e.ResponseSize = size.Int64
		e.LeaseUntil, e.ExpiresAt = fromMillis(lease), fromMillis(expires)
		e.CreatedAt, e.UpdatedAt = fromMillis(created), fromMillis(updated)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("admin: reading %s: %w", a.Table(), err)
	}
	return out, nil
}

// ScopeStats summarises one scope's records at one moment.
type ScopeStats struct {
	// Scope as the application names it.
	Scope string `json:"scope"`
	// Records by state; Total is their sum.
	Total      int64 `json:"total"`
	Processing int64 `json:"processing"`
	Succeeded  int64 `json:"succeeded"`
	Failed     int64 `json:"failed"`
	Rejected   int64 `json:"rejected"`
	// Stuck counts PROCESSING records whose lease ran out.
	Stuck int64 `json:"stuck"`
	// TakenOver counts records whose fence is above 1: claimed again at least once (a takeover, a
	// sweeper recovery or a release). FenceBumps sums fence - 1: how many times that happened.
	TakenOver  int64 `json:"taken_over"`
	FenceBumps int64 `json:"fence_bumps"`
	// Expired counts records past their expiry that the sweeper has not deleted yet (they count as
	// absent).
	Expired int64 `json:"expired"`
	// OldestProcessing is when the oldest PROCESSING claim was made; zero when none.
	OldestProcessing time.Time `json:"oldest_processing,omitzero"`
}

// Stats returns per-scope statistics of the records matching f (Scope, Status, OlderThan, GID;
// Limit is ignored), in scope order: one aggregate query. The table cannot tell how many
// duplicates a scope saw — a replay writes nothing — so there is no duplicate rate here; the
// idemkit.calls counter of package idemotel has it.
func (a *Admin) Stats(ctx context.Context, f Filter) ([]ScopeStats, error) {
	now := a.opts.Now()
	w, err := a.where(ctx, &f, now)
	if err != nil {
		return nil, err
	}
	query, args := a.q.stats(w, millis(now))
	rows, err := a.db.WithContext(ctx).Raw(query, args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("admin: aggregating %s: %w", a.Table(), err)
	}
	defer rows.Close()
	var out []ScopeStats
	for rows.Next() {
		var s ScopeStats
		var oldest sql.NullInt64
		if err := rows.Scan(&s.Scope, &s.Total, &s.Processing, &s.Succeeded, &s.Failed, &s.Rejected, &s.Stuck,
			&s.TakenOver, &s.FenceBumps, &s.Expired, &oldest); err != nil {
			return nil, fmt.Errorf("admin: aggregating %s: %w", a.Table(), err)
		}
		s.Scope = a.DisplayScope(s.Scope)
		if oldest.Valid {
			s.OldestProcessing = fromMillis(oldest.Int64)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("admin: aggregating %s: %w", a.Table(), err)
	}
	return out, nil
}

// Claims returns the PROCESSING records of the namespace per scope: how many, how many stuck (lease
// run out) and the age of the oldest. It implements idemotel.Options.Claims; one aggregate query.
func (a *Admin) Claims(ctx context.Context) ([]idemotel.ClaimStats, error) {
	now := a.opts.Now()
	var w where
	if a.ns != "" {
		a.q.namespace(&w, a.ns)
	}
	query, args := a.q.claims(w, millis(now))
	rows, err := a.db.WithContext(ctx).Raw(query, args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("admin: counting claims of %s: %w", a.Table(), err)
	}
	defer rows.Close()
	var out []idemotel.ClaimStats
	for rows.Next() {
		var c idemotel.ClaimStats
		var oldest int64
		if err := rows.Scan(&c.Scope, &c.Processing, &c.Stuck, &oldest); err != nil {
			return nil, fmt.Errorf("admin: counting claims of %s: %w", a.Table(), err)
		}
		c.Scope = a.DisplayScope(c.Scope)
		if oldest > 0 {
			c.Oldest = max(now.Sub(fromMillis(oldest)), 0)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// SweepPlan is what a sweeper pass would do at one moment.
type SweepPlan struct {
	// Now is the moment the plan was made for.
	Now time.Time
	// Expired are records the sweeper would delete (record.Store.DeleteExpired), by status, then
	// oldest expiry first (the order of the status index, which MySQL's sweeper reads its batches in);
	// ExpiredTotal counts them all.
	Expired      []*Entry
	ExpiredTotal int64
	// Stale are claims it would recover — FAILED, fence + 1, so their holder can no longer finish
	// them and the next attempt runs (record.Store.RecoverStale) — oldest lease first.
	Stale      []*Entry
	StaleTotal int64
	// Pending are claims tied to a global transaction whose lease ran out: a reconciler
	// (hooks.Reconciler) asks the transaction manager about each and settles it; the sweeper's own
	// tasks leave them alone.
	Pending      []*Entry
	PendingTotal int64
}

// PlanSweep returns what a sweeper pass would delete, recover or leave to a reconciler, listing at
// most limit records of each kind (below 1, DefaultLimit). With a namespace it shows only that
// namespace's records, while a sweeper works on the whole table.
func (a *Admin) PlanSweep(ctx context.Context, limit int) (*SweepPlan, error) {
	if limit < 1 {
		limit = DefaultLimit
	}
	now := a.opts.Now()
	ms := millis(now)
	p := &SweepPlan{Now: now}
	kinds := []struct {
		cond  string
		args  []any
		order string
		list  *[]*Entry
		total *int64
	}{
		{condExpired, []any{ms, ms}, "status, expires_at", &p.Expired, &p.ExpiredTotal},
		{condStale, []any{ms, ms}, "lease_until", &p.Stale, &p.StaleTotal},
		{condPending, []any{ms}, "lease_until", &p.Pending, &p.PendingTotal},
	}
	for _, k := range kinds {
		var w where
		if a.ns != "" {
			a.q.namespace(&w, a.ns)
		}
		w.add(k.cond, k.args...)
		query, args := a.q.sweepList(w, k.order, limit)
		list, err := a.entries(ctx, query, args)
		if err != nil {
			return nil, err
		}
		*k.list = list
		query, args = a.q.count(w)
		if *k.total, err = a.count(ctx, query, args); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Sweep runs what a sweeper pass runs over the whole table — record.Store.DeleteExpired and
// RecoverStale at the Admin's clock, up to limit records each — and returns how many records it
// deleted and recovered. Pending claims are left to a reconciler. It refuses (ErrRefused) under a
// namespace, since it would touch other namespaces' records. With a Redis client it recovers as
// sweep.RecordTasksWithLocker does (record.Store.RecoverStaleClaims) and deletes the lock each
// recovered claim's dead holder still holds (a LockTTL longer than the Lease), by the holder's token,
// so the retry is not turned away as in flight until the lock expires; another attempt's lock stays.
// A lock it cannot delete does not undo the recovery: it deletes the others and returns the counts
// with an error wrapping ErrRedisCleanup.
func (a *Admin) Sweep(ctx context.Context, limit int) (deleted, recovered int, err error) {
	if a.ns != "" {
		return 0, 0, fmt.Errorf("%w: a sweep works on the whole table, every namespace's records; run it without a namespace", ErrRefused)
	}
	if limit < 1 {
		return 0, 0, errors.New("admin: sweep limit must be positive")
	}
	now := a.opts.Now()
	deleted, err = a.store.DeleteExpired(ctx, now, limit)
	if err != nil {
		return deleted, 0, err
	}
	if a.lk == nil {
		recovered, err = a.store.RecoverStale(ctx, now, limit)
		return deleted, recovered, err
	}
	recs, err := a.store.RecoverStaleClaims(ctx, now, limit)
	var errs []error
	for _, r := range recs {
		if rerr := a.releaseLock(ctx, r); rerr != nil {
			errs = append(errs, fmt.Errorf("the lock of %q / %q: %w", r.Scope, r.Key, rerr))
		}
	}
	if len(errs) > 0 {
		err = errors.Join(err, fmt.Errorf("%w: %d recovered claim(s) keep their dead holder's lock (it expires by itself): %w",
			ErrRedisCleanup, len(errs), errors.Join(errs...)))
	}
	return deleted, len(recs), err
}
