package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
)

// who says who runs idemctl, for the error a released record gets.
func (c *cli) who() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	by := "idemctl (" + name + "@" + cmp.Or(host, "unknown") + ")"
	if c.o.reason != "" {
		by += ": " + c.o.reason
	}
	return by
}

func (c *cli) release(ctx context.Context, pos []string) error {
	scope, key := pos[0], pos[1]
	rec, err := c.adm.Get(ctx, scope, key)
	if err != nil {
		return notFoundKey(err, scope, key)
	}
	opts := admin.ReleaseOptions{By: c.who(), Force: c.o.force}
	if err := c.adm.CanRelease(rec, opts); err != nil {
		return err
	}
	q := fmt.Sprintf("Release the claim on %q / %q (PROCESSING, fence %d, owner %s, claimed %s)? It becomes FAILED with fence %d and the next attempt runs again.",
		scope, key, rec.Fence, cell(rec.Owner), ago(c.now(), rec.CreatedAt), rec.Fence+1)
	// Without Redis the holder's lock stays, and nothing can delete it later: the released record
	// names no owner, and a lock is only ever deleted by its holder's token.
	lockKept := ""
	if c.rdb == nil && rec.Owner != "" {
		lockKept = "without --redis the holder's lock, if it still holds one, stays until it expires (the application's LockTTL): until then a retry is answered as in flight, and idemctl cannot delete it afterwards"
		q += " W" + lockKept[1:] + "; answer no and give --redis to delete it with the claim."
	}
	ctx, err = c.confirm(q) // a fresh --timeout for what follows
	if err != nil {
		return err
	}
	next, err := c.adm.Release(ctx, rec, opts)
	if errors.Is(err, idemkit.ErrFenced) {
		return c.changed(ctx, scope, key, rec)
	}
	if next == nil {
		return err
	}
	if c.o.json {
		c.writeJSON(map[string]any{"released": true, "before": c.recordJSON(rec, int64(len(rec.Response)), c.now()),
			"record": c.recordJSON(next, int64(len(next.Response)), c.now()), "warning": cmp.Or(errString(err), lockKept)})
	} else {
		fmt.Fprintf(c.stdout, "released %q / %q: PROCESSING fence %d -> FAILED fence %d (error %q); the next attempt runs again, the old holder can no longer finish\n",
			scope, key, rec.Fence, next.Fence, next.Error)
		if lockKept != "" {
			fmt.Fprintf(c.stdout, "note: %s\n", lockKept)
		}
	}
	return err // a Redis failure after the release: reported, exit 1
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// notFoundKey words a record lookup's not-found error.
func notFoundKey(err error, scope, key string) error {
	if errors.Is(err, idemkit.ErrNotFound) {
		return fmt.Errorf("%w: no record for key %q in scope %q", idemkit.ErrNotFound, key, scope)
	}
	return err
}

// changed reports a fenced write: the record moved on since it was read.
func (c *cli) changed(ctx context.Context, scope, key string, was *idemkit.Record) error {
	now := "it is gone"
	if cur, err := c.adm.Get(ctx, scope, key); err == nil {
		now = fmt.Sprintf("it is now %s with fence %d, owner %s", cur.Status, cur.Fence, cell(cur.Owner))
	}
	return fmt.Errorf("%w: the record changed since it was read (it was %s with fence %d; %s): nothing was written; look again with idemctl inspect",
		idemkit.ErrFenced, was.Status, was.Fence, now)
}

func (c *cli) purge(ctx context.Context, pos []string) error {
	if len(pos) == 2 {
		return c.purgeOne(ctx, pos[0], pos[1])
	}
	return c.purgeMany(ctx)
}

func (c *cli) purgeOne(ctx context.Context, scope, key string) error {
	rec, err := c.adm.Get(ctx, scope, key)
	if (errors.Is(err, idemkit.ErrNotFound) || errors.Is(err, admin.ErrUnknownScope)) && c.rdb != nil {
		return c.purgeCachedOnly(ctx, scope, key, err)
	}
	if err != nil {
		return notFoundKey(err, scope, key)
	}
	opts := admin.PurgeOptions{Force: c.o.force}
	if err := c.adm.CanPurge(rec, opts); err != nil {
		return err
	}
	q := fmt.Sprintf("Delete the record of %q / %q (%s, fence %d)? The key is new again: the next attempt runs.", scope, key, rec.Status, rec.Fence)
	switch {
	case c.rdb != nil:
	case rec.Status.Terminal(): // only a SUCCEEDED or REJECTED record is ever cached
		q += " Without --redis a cached result may still be replayed until it expires."
	case rec.Status == idemkit.StatusProcessing && rec.Owner != "":
		q += " Without --redis the holder's lock, if it still holds one, stays until it expires: until then a retry is answered as in flight."
	}
	ctx, err = c.confirm(q) // a fresh --timeout for what follows
	if err != nil {
		return err
	}
	err = c.adm.Purge(ctx, rec, opts)
	if errors.Is(err, idemkit.ErrFenced) {
		return c.changed(ctx, scope, key, rec)
	}
	if err != nil && !errors.Is(err, admin.ErrRedisCleanup) {
		return err
	}
	if c.o.json {
		c.writeJSON(map[string]any{"deleted": 1, "record": c.recordJSON(rec, int64(len(rec.Response)), c.now()), "warning": errString(err)})
	} else {
		fmt.Fprintf(c.stdout, "deleted %q / %q (%s, fence %d)\n", scope, key, rec.Status, rec.Fence)
	}
	return err
}

// purgeCachedOnly handles purge --redis of a key without a record: a cached result its record left
// behind (purged without --redis) would answer duplicates until it expires, and a damaged lock value
// (admin.RedisState.Damaged) fails its calls while it stays, so either is deleted, after
// confirmation. A lock (an attempt in flight) is left alone. notFound is the lookup's error, returned
// when Redis holds nothing to delete.
func (c *cli) purgeCachedOnly(ctx context.Context, scope, key string, notFound error) error {
	ad, err := c.adm.Address(scope, key)
	if err != nil {
		return err
	}
	ad, rs, err := c.redisWithoutRecord(ctx, scope, key, ad)
	if err != nil {
		return err
	}
	if rs.Damaged {
		return c.purgeDamaged(ctx, scope, key, ad, rs)
	}
	if !rs.Cached {
		if rs.Locked {
			return fmt.Errorf("%w (Redis holds the lock of an attempt in flight, %s left: nothing to purge)", notFoundKey(notFound, scope, key), roundDur(rs.LockTTL))
		}
		return notFoundKey(notFound, scope, key)
	}
	q := fmt.Sprintf("No record of %q / %q, but Redis still holds its cached result (%d bytes, %s left), which answers its duplicates. Delete it?",
		scope, key, rs.CachedSize, roundDur(rs.CacheTTL))
	return c.forgetWithoutRecord(ctx, q, "cached result", "cached_result_deleted", scope, key, ad)
}

// purgeDamaged deletes, after confirmation, the damaged lock value Redis holds at ad for a key
// without a record.
func (c *cli) purgeDamaged(ctx context.Context, scope, key string, ad idemkit.Address, rs *admin.RedisState) error {
	q := fmt.Sprintf("No record of %q / %q, but Redis holds a damaged lock value under its key (none the Locker writes: no attempt holds it; %s), which fails its calls (idemkit.ErrLockUnavailable). Delete it?",
		scope, key, damagedTTL(rs))
	return c.forgetWithoutRecord(ctx, q, "damaged lock value", "damaged_lock_deleted", scope, key, ad)
}

// forgetWithoutRecord deletes, once q is confirmed, what Redis holds at ad for a key without a record
// (what: a cached result or a damaged lock value; field: its JSON report's name) and reports it.
func (c *cli) forgetWithoutRecord(ctx context.Context, q, what, field, scope, key string, ad idemkit.Address) error {
	ctx, err := c.confirm(q)
	if err != nil {
		return err
	}
	deleted, err := c.adm.ForgetCached(ctx, ad.Scope, ad.Key)
	if err != nil {
		return err
	}
	if c.o.json {
		c.writeJSON(map[string]any{"deleted": 0, field: deleted})
	} else if deleted {
		fmt.Fprintf(c.stdout, "no record; deleted the %s of %q / %q\n", what, scope, key)
	} else {
		fmt.Fprintf(c.stdout, "no record; the %s of %q / %q was gone already\n", what, scope, key)
	}
	return nil
}

func (c *cli) purgeMany(ctx context.Context) error {
	entries, limitReached, err := c.listLimited(ctx) // limitReached: more match, the report says so
	if err != nil {
		return err
	}
	now := c.now()
	opts := admin.PurgeOptions{Force: c.o.force}
	more := ""
	if limitReached {
		more = fmt.Sprintf(" (--limit %d reached: more match; run it again or raise --limit)", c.o.filter.Limit)
	}
	var todo []*admin.Entry
	skipped := []string{} // --json: a list, empty when nothing is left alone
	for _, e := range entries {
		if err := c.adm.CanPurge(&e.Record, opts); err != nil {
			skipped = append(skipped, fmt.Sprintf("%q / %q: %v", c.adm.DisplayScope(e.Scope), e.Key, err))
			continue
		}
		todo = append(todo, e)
	}
	if len(todo) == 0 {
		if c.o.json {
			c.writeJSON(map[string]any{"deleted": 0, "changed": 0, "skipped": skipped, "limit_reached": limitReached})
		} else {
			fmt.Fprintf(c.stdout, "no records to delete (%d matched, %d skipped)%s\n", len(entries), len(skipped), more)
			for _, s := range skipped {
				fmt.Fprintln(c.stdout, "  skipped "+s)
			}
		}
		if len(skipped) > 0 {
			return fmt.Errorf("%w: %d record(s) left alone (live claims, claims of a global transaction, records an attempt may still run or answer under; --force deletes them)", admin.ErrRefused, len(skipped))
		}
		return nil
	}
	if !c.o.json {
		shown := todo[:min(len(todo), 10)]
		c.entriesTable(c.stderr, shown, now)
		if len(todo) > len(shown) {
			fmt.Fprintf(c.stderr, "... and %d more\n", len(todo)-len(shown))
		}
	}
	q := fmt.Sprintf("Delete these %d record(s)? Their keys are new again.", len(todo))
	if limitReached {
		q += fmt.Sprintf(" (--limit %d reached: more match)", c.o.filter.Limit)
	}
	ctx, err = c.confirm(q) // a fresh --timeout for what follows
	if err != nil {
		return err
	}
	deleted, changed := 0, 0
	var warnings []error
	p := c.startProgress("deleting")
	for i, e := range todo {
		switch err := c.adm.Purge(ctx, &e.Record, opts); {
		case err == nil:
			deleted++
		case errors.Is(err, idemkit.ErrFenced):
			changed++
		case errors.Is(err, admin.ErrRefused):
			// Refused under the row lock (its holder renewed the claim since the listing), or an
			// attempt holds the key's lock in Redis.
			skipped = append(skipped, fmt.Sprintf("%q / %q: %v", c.adm.DisplayScope(e.Scope), e.Key, err))
		case errors.Is(err, admin.ErrRedisCleanup):
			deleted++
			warnings = append(warnings, err)
		default:
			p.stop()
			// The failed delete may have landed all the same (its reply lost to the timeout):
			// the count is a floor, and a listing tells what is left.
			return fmt.Errorf("after deleting %d record(s), and perhaps the one that failed (%s / %s; list tells what is left): %w",
				deleted, c.adm.DisplayScope(e.Scope), e.Key, err)
		}
		p.set(i + 1)
	}
	p.stop()
	if c.o.json {
		c.writeJSON(map[string]any{"deleted": deleted, "changed": changed, "skipped": skipped, "warnings": len(warnings), "limit_reached": limitReached})
	} else {
		fmt.Fprintf(c.stdout, "deleted %d record(s); %d changed since they were read and were left alone; %d skipped%s\n", deleted, changed, len(skipped), more)
		for _, s := range skipped {
			fmt.Fprintln(c.stdout, "  skipped "+s)
		}
	}
	switch {
	case len(warnings) > 0:
		return errors.Join(warnings...)
	case changed > 0 || len(skipped) > 0:
		return fmt.Errorf("%w: %d record(s) left alone", admin.ErrRefused, changed+len(skipped))
	}
	return nil
}
