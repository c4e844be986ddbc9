package record

import (
	"context"
	"time"

	"github.com/idemkit/idemkit"
)

// RecoveredError is the Error a record gets when [Store.RecoverStale] fails it.
const RecoveredError = "idemkit: lease expired; recovered by sweeper"

// maxBatch bounds the ids of one statement; larger limits run in several batches.
const maxBatch = 500

// DeleteExpired deletes up to limit records whose expiry is not after now (records without one, and
// records tied to a global transaction nobody settled yet — PROCESSING with a GID — never expire) and
// returns how many it deleted. It selects ids (oldest expiry first), then deletes them
// re-checking the expiry, in batches of at most 500: each statement is short and commits on its own. A
// limit below 1 deletes nothing. It is a hook for a sweeper; safe for concurrent use, though one
// sweeper at a time is enough.
func (s *Store) DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	ms := millis(now)
	return s.batch(ctx, limit, "deleting expired records from",
		s.q.selExpired, []any{ms}, s.q.delExpired, []any{ms})
}

// RecoverStale fails up to limit PROCESSING records whose lease ran out by now, that have no GID and
// have not expired: status FAILED, fence+1, owner "", Error [RecoveredError], UpdatedAt now. Their
// stalled holders can then no longer finish them, and the next attempt runs again. Records with a GID
// are left to a transaction reconciler (see [Store.Pending]). It returns how many it recovered; batches
// and concurrency are as for [Store.DeleteExpired].
func (s *Store) RecoverStale(ctx context.Context, now time.Time, limit int) (int, error) {
	ms := millis(now)
	return s.batch(ctx, limit, "recovering stale records of",
		s.q.selStale, []any{ms, ms}, s.q.recoverPfx, []any{RecoveredError, ms, ms, ms})
}

// batch selects up to limit ids with sel (selArgs, then the batch size) and runs act (actArgs, then
// the ids) on them, batch by batch, and returns the rows act affected.
func (s *Store) batch(ctx context.Context, limit int, doing, sel string, selArgs []any, actPrefix string, actArgs []any) (int, error) {
	total := 0
	for limit > 0 {
		n := min(limit, s.q.batch)
		ids, err := s.selectIDs(ctx, sel, append(selArgs[:len(selArgs):len(selArgs)], n)...)
		if err != nil {
			return total, s.q.interpretError(doing, err)
		}
		if len(ids) == 0 {
			break
		}
		args := make([]any, 0, len(actArgs)+n)
		args = append(args, actArgs...)
		for i := range n { // pad with the first id: one statement text per batch size
			id := ids[0]
			if i < len(ids) {
				id = ids[i]
			}
			args = append(args, id)
		}
		query := inList(actPrefix, n)
		if s.q.rebind {
			query = rebind(query)
		}
		affected, err := s.c.exec(ctx, query, args...)
		total += int(affected)
		if err != nil {
			return total, s.q.interpretError(doing, err)
		}
		if len(ids) < n {
			break
		}
		limit -= len(ids)
	}
	return total, nil
}

func (s *Store) selectIDs(ctx context.Context, query string, args ...any) ([]int64, error) {
	rows, err := s.c.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// Pending implements [idemkit.PendingLister]: up to q.Limit PROCESSING records of q.Scopes with a GID
// whose lease ran out by q.Now, oldest lease first, whether or not their expiry passed: claims tied to
// a distributed transaction whose outcome has not been recorded, for a reconciler to settle by asking
// the transaction manager. No scopes or a limit below 1 return nil.
func (s *Store) Pending(ctx context.Context, q idemkit.PendingQuery) ([]*idemkit.Record, error) {
	if q.Limit < 1 || len(q.Scopes) == 0 {
		return nil, nil
	}
	args := make([]any, 0, len(q.Scopes)+2)
	args = append(args, millis(q.Now))
	for _, sc := range q.Scopes {
		args = append(args, sc)
	}
	args = append(args, q.Limit)
	query := inList(s.q.pendingPfx, len(q.Scopes)) + pendingSfx
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
