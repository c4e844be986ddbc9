package record

import (
	"cmp"
	"context"
	"time"

	"github.com/idemkit/idemkit"
)

// RecoveredError is the Error a record gets when [Store.RecoverStale] fails it.
const RecoveredError = "idemkit: lease expired; recovered by sweeper"

// maxBatch bounds the rows of one statement; larger limits run in several batches.
const maxBatch = 500

// DeleteExpired deletes up to limit records whose expiry is not after now (records without one,
// records tied to a global transaction nobody settled yet — PROCESSING with a GID — and claims whose
// lease is live never expire) and returns how many it deleted. It deletes in batches of at most 500 rows, each one statement that
// commits on its own: a DELETE of the primary keys a LIMIT subquery selects (on MySQL, a plain read
// of a batch's primary keys, then a DELETE of those rows by primary key), re-checking the expiry on
// every row: a record taken over in between is left alone. The DELETE locks each row before its
// index entry, as every other writer does: it does not deadlock with a Guard.Tx taking a record over.
// The (status, expires_at) index serves the selection. A limit below 1 deletes nothing. It is a hook
// for a sweeper; safe for concurrent use, though one sweeper at a time is enough.
func (s *Store) DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	ms := millis(now)
	if s.q.dialect == dialectMySQL {
		return s.batchByKey(ctx, limit, "deleting expired records from", s.q.expiredKeys, []any{ms, ms}, s.q.delExpired, []any{ms, ms})
	}
	args := []any{ms, ms, ms, ms} // condExpired's, and again in the subquery
	return s.batch(ctx, limit, "deleting expired records from", s.q.delExpired, args)
}

// RecoverStale fails up to limit PROCESSING records whose lease ran out by now, that have no GID and
// have not expired: status FAILED, fence+1, owner "", Error [RecoveredError], UpdatedAt now. Their
// stalled holders can then no longer finish them, and the next attempt runs again. Records with a GID
// are left to a transaction reconciler (see [Store.Pending]). It returns how many it recovered; batches
// and concurrency are as for [Store.DeleteExpired], and the index range it reads holds the PROCESSING
// records only.
func (s *Store) RecoverStale(ctx context.Context, now time.Time, limit int) (int, error) {
	ms := millis(now)
	args := []any{RecoveredError, ms, ms, ms}
	if s.q.dialect == dialectMySQL {
		return s.batchByKey(ctx, limit, "recovering stale records of", s.q.staleKeys, []any{ms, ms}, s.q.recover, args)
	}
	return s.batch(ctx, limit, "recovering stale records of", s.q.recover, append(args, ms, ms)) // condStale again in the subquery
}

// RecoverStaleClaims is [Store.RecoverStale] that returns the claims it recovered as they were (Scope,
// Key, Status, Fence and Owner, the holder's lock token), for a sweeper to release the locks their dead
// holders may still hold (see sweep.RecordTasksWithLocker). It reads a batch of stale claims, then
// fails each with a statement of its own, conditioned on the version it read and on its staleness:
// one finished, renewed, taken over or recovered by another sweeper in between is left alone and not
// returned. That is a statement per claim rather than per batch (no dialect returns the owner a bulk
// UPDATE overwrote); stale claims are few. Limits and batches are as for RecoverStale.
func (s *Store) RecoverStaleClaims(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error) {
	ms := millis(now)
	var out []*idemkit.Record
	for limit > 0 {
		n := min(limit, s.q.batch)
		stale, err := s.staleClaims(ctx, ms, n)
		if err != nil {
			return out, s.q.interpretError("listing stale records of", err)
		}
		for _, r := range stale {
			affected, err := s.exec(ctx, s.q.recoverOne, RecoveredError, ms, ms, ms, r.Scope, r.Key, r.Fence, r.Owner)
			if err != nil {
				return out, s.q.interpretError("recovering stale records of", err)
			}
			if affected > 0 {
				out = append(out, r)
			}
		}
		if len(stale) < n {
			break
		}
		limit -= len(stale)
	}
	return out, nil
}

// staleClaims reads the versions of up to n claims stale at ms.
func (s *Store) staleClaims(ctx context.Context, ms int64, n int) ([]*idemkit.Record, error) {
	rows, err := s.c.query(ctx, s.q.staleList, ms, ms, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*idemkit.Record
	for rows.Next() {
		r := &idemkit.Record{Status: idemkit.StatusProcessing}
		if err := rows.Scan(&r.Scope, &r.Key, &r.Fence, &r.Owner); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, cmp.Or(rows.Err(), rows.Close())
}

// batch runs query (args, then the batch size) until it affects fewer rows than the batch size or
// limit rows were affected, and returns the rows affected. Each statement commits on its own, so one
// the database rolled back on a write conflict runs again (see exec): on PostgreSQL under REPEATABLE
// READ or SERIALIZABLE, a statement that waited for a record taken over meanwhile fails with a
// serialization failure rather than re-checking its condition on the row's latest version, and run
// again it leaves that record alone.
func (s *Store) batch(ctx context.Context, limit int, doing, query string, args []any) (int, error) {
	total := 0
	for limit > 0 {
		n := min(limit, s.q.batch)
		affected, err := s.exec(ctx, query, append(args[:len(args):len(args)], n)...)
		total += int(affected)
		if err != nil {
			return total, s.q.interpretError(doing, err)
		}
		if int(affected) < n {
			break
		}
		limit -= int(affected)
	}
	return total, nil
}

// batchByKey is batch on MySQL. Each batch reads the primary keys of up to n rows with list
// (listArgs, then n), a plain read that locks nothing, then runs act (actArgs, then those keys) —
// a statement that finds the rows by primary key and re-checks its condition on each — as one
// statement outside a caller's transaction: a deadlock victim runs again, as a record's writes do.
// The last batch is the one whose list comes back short: a batch that acts on fewer rows than it
// listed (some were taken over in between) is followed by the next, as DELETE (UPDATE) ... LIMIT
// went on, unless it acted on none (a transaction's snapshot would list the same rows again).
func (s *Store) batchByKey(ctx context.Context, limit int, doing, list string, listArgs []any, act string, actArgs []any) (int, error) {
	total := 0
	for limit > 0 {
		n := min(limit, s.q.batch)
		args, k, err := s.keyArgs(ctx, list, append(listArgs[:len(listArgs):len(listArgs)], n), actArgs)
		if err != nil {
			return total, s.q.interpretError(doing, err)
		}
		if k == 0 {
			break
		}
		affected, err := s.exec(ctx, keyList(act, k), args...)
		total += int(affected)
		if err != nil {
			return total, s.q.interpretError(doing, err)
		}
		if k < n || affected == 0 {
			break
		}
		limit -= int(affected)
	}
	return total, nil
}

// keyArgs runs list (args) and returns lead followed by the scope and key of each row it read, and
// how many rows it read.
func (s *Store) keyArgs(ctx context.Context, list string, args, lead []any) ([]any, int, error) {
	rows, err := s.c.query(ctx, list, args...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	out := append(make([]any, 0, len(lead)+2*s.q.batch), lead...)
	k := 0
	for rows.Next() {
		var scope, key string
		if err := rows.Scan(&scope, &key); err != nil {
			return nil, 0, err
		}
		out = append(out, scope, key)
		k++
	}
	return out, k, cmp.Or(rows.Err(), rows.Close())
}

// Pending implements [idemkit.PendingLister]: up to q.Limit PROCESSING records of q.Scopes with a GID
// whose lease ran out by q.Now, oldest lease first, whether or not their expiry passed: claims tied to
// a distributed transaction whose outcome has not been recorded, for a reconciler to settle by asking
// the transaction manager. The index range it reads holds the PROCESSING records only. No scopes or a
// limit below 1 return nil.
func (s *Store) Pending(ctx context.Context, q idemkit.PendingQuery) ([]*idemkit.Record, error) {
	if q.Limit < 1 || len(q.Scopes) == 0 {
		return nil, nil
	}
	args := make([]any, 0, len(q.Scopes)+7)
	args = append(args, millis(q.Now))
	for _, sc := range q.Scopes {
		args = append(args, sc)
	}
	query := inList(s.q.pendingPfx, len(q.Scopes))
	if a := q.After; a != nil {
		lease := millis(a.LeaseUntil)
		query += pendingAfter
		args = append(args, lease, lease, a.Scope, a.Scope, a.Key)
	}
	args = append(args, q.Limit)
	query += pendingSfx
	if s.q.rebind {
		query = rebind(query)
	}
	rows, err := s.c.query(ctx, query, args...)
	if err != nil {
		return nil, s.q.interpretError("listing pending records of", err)
	}
	defer rows.Close()
	var out []*idemkit.Record
	for rows.Next() {
		rec := new(idemkit.Record)
		var c recordColumns
		if err := rows.Scan(append([]any{&rec.Scope, &rec.Key}, c.dest(rec)...)...); err != nil {
			return nil, s.q.interpretError("listing pending records of", err)
		}
		c.fill(rec)
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, s.q.interpretError("listing pending records of", err)
	}
	return out, nil
}
