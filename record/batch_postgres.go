package record

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
)

// Group commit on PostgreSQL (see batch.go for what a batch is and keeps).
//
//   - Claims: one multi-row INSERT … ON CONFLICT (scope, idem_key) DO NOTHING with bound parameters.
//     PostgreSQL counts the rows it inserted, so the claims are read as on MySQL: all of them won, or
//     each asks whether the row carries its own owner token.
//   - Finishes: one UPDATE … FROM (VALUES …) RETURNING the keys it changed: one statement and one
//     commit, and each finish learns whether its own conditions (fence, owner, status) matched. A key
//     finished twice in one batch (a renewal racing its claim's finish) goes in the statement once:
//     PostgreSQL would apply one of two joined rows to it and return it once, so the other would seem
//     written. The second runs alone after the batch, as it would have after the first alone.
//
// A statement the server refuses (SQLSTATE: a deadlock, a value it rejects) committed nothing, and each
// write runs alone. An error that ends the session (FATAL 57P01 admin_shutdown: pg_terminate_backend, a
// fast shutdown) may come after the commit, while the server waits for a synchronous standby, say: a
// finish that runs again then finds its own write in place and succeeds (see finishAgain). A finish batch
// whose outcome is unknown (no answer) gives each finish the error, as a lost reply would.

// pgFinishCols is the number of values of a finish row in finishRowsArgs.
const pgFinishCols = 11

// insertRowsArgs returns the multi-row INSERT of the claims of ops and its arguments (PostgreSQL).
func (q *queries) insertRowsArgs(ops []*claimOp) (string, []any) {
	args := make([]any, 0, 14*len(ops))
	var b strings.Builder
	b.Grow(len(q.valuesPfx) + len(ops)*14*7 + len(insertConflictSfx))
	b.WriteString(q.valuesPfx)
	for i, op := range ops {
		if i > 0 {
			b.WriteString(", ")
		}
		r := op.rec
		args = placeholders(&b, args, r.Scope, r.Key, string(r.Status), r.Fence, r.Owner, r.Fingerprint, r.GID, r.BranchID,
			response(r.Response), r.Error, millis(r.LeaseUntil), millis(r.ExpiresAt), millis(r.CreatedAt), millis(r.UpdatedAt))
	}
	b.WriteString(insertConflictSfx)
	return b.String(), args
}

// insertConflictSfx ends a multi-row INSERT of claims on PostgreSQL: a row whose key exists is
// skipped, and not counted.
const insertConflictSfx = " ON CONFLICT (scope, idem_key) DO NOTHING"

// finishRowsArgs returns the UPDATE of the finishes of ops (no key twice) and its arguments
// (PostgreSQL). Each value is cast to its column's type: a VALUES list has no column to infer it from.
func (q *queries) finishRowsArgs(ops []*finishOp) (string, []any) {
	args := make([]any, 0, pgFinishCols*len(ops))
	var b strings.Builder
	b.Grow(len(q.finishRowsPfx) + len(ops)*pgFinishCols*16 + len(q.finishRowsSfx))
	b.WriteString(q.finishRowsPfx)
	for i, op := range ops {
		if i > 0 {
			b.WriteString(", ")
		}
		r, n := op.rec, len(args)
		args = append(args, r.Scope, r.Key, op.prev.Fence, op.prev.Owner, string(op.prev.Status), string(r.Status),
			response(r.Response), r.Error, millis(r.LeaseUntil), millis(r.ExpiresAt), millis(r.UpdatedAt))
		b.WriteByte('(')
		for j, typ := range [pgFinishCols]string{"varchar", "varchar", "bigint", "varchar", "varchar", "varchar",
			"bytea", "text", "bigint", "bigint", "bigint"} {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n + j + 1))
			b.WriteString("::")
			b.WriteString(typ)
		}
		b.WriteByte(')')
	}
	b.WriteString(q.finishRowsSfx)
	return b.String(), args
}

// placeholders writes a parenthesised row of $n placeholders for vals, numbered after args, and
// returns args with vals appended.
func placeholders(b *strings.Builder, args []any, vals ...any) []any {
	b.WriteByte('(')
	for i := range vals {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(len(args) + i + 1))
	}
	b.WriteByte(')')
	return append(args, vals...)
}

// finishChunkPostgres writes the finishes of ops in one statement (see the top of this file).
func (s *Store) finishChunkPostgres(ctx context.Context, ops []*finishOp) {
	type key struct{ scope, key string }
	alone := func(ops []*finishOp) {
		for _, op := range ops {
			op.n, op.err = s.finishAlone(ctx, op.rec, op.prev)
		}
	}
	slices.SortFunc(ops, func(a, b *finishOp) int {
		return cmp.Or(strings.Compare(a.rec.Scope, b.rec.Scope), strings.Compare(a.rec.Key, b.rec.Key))
	})
	var later []*finishOp // second finishes of a key, after the batch
	batch := make([]*finishOp, 0, len(ops))
	for i, op := range ops {
		if i > 0 && op.rec.Scope == ops[i-1].rec.Scope && op.rec.Key == ops[i-1].rec.Key {
			later = append(later, op)
			continue
		}
		batch = append(batch, op)
	}
	defer alone(later)
	if len(batch) == 1 {
		alone(batch)
		return
	}
	query, args := s.q.finishRowsArgs(batch)
	changed := make(map[key]bool, len(batch))
	rows, err := s.c.query(ctx, query, args...)
	if err == nil {
		for rows.Next() {
			var k key
			if err = rows.Scan(&k.scope, &k.key); err != nil {
				break
			}
			changed[k] = true
		}
		err = cmp.Or(err, rows.Close(), rows.Err())
	}
	var refused interface{ SQLState() string }
	switch {
	case err == nil:
		for _, op := range batch {
			if changed[key{op.rec.Scope, op.rec.Key}] {
				op.n = 1
			}
		}
	case errors.As(err, &refused):
		for _, op := range batch {
			s.finishAgain(ctx, op)
		}
	default:
		for _, op := range batch {
			op.err = err
		}
	}
}

// finishesPostgres writes the finishes of ops in one statement per chunk.
func (s *Store) finishesPostgres(ctx context.Context, ops []*finishOp) {
	chunks(ops, finishLen, func(ops []*finishOp) { s.finishChunkPostgres(ctx, ops) })
}

// claimsBuilt returns the statement inserting the claims of ops and its arguments, in s's dialect.
func (s *Store) claimsBuilt(ops []*claimOp) (string, []any) {
	if s.q.dialect == dialectPostgres {
		return s.q.insertRowsArgs(ops)
	}
	return s.q.insertRows(ops), nil
}
