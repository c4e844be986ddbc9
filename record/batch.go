package record

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/batch"
)

// Group commit of claims, finishes and reads (MySQL and MariaDB; PostgreSQL's statements are in
// batch_postgres.go).
//
// Execute and Mark modes write their record outside the business's transaction: a claim (INSERT)
// before the work and a finish (UPDATE) after it, each its own transaction — a statement, a round trip
// and a commit each. Tx mode without a Locker reads the record before the function. Under concurrency
// a Store sends these the way the Locker sends its Redis commands (package internal/batch): one goes
// out at once while none of its kind is in flight; those that came meanwhile leave together when it
// returns.
//
//   - Claims: one multi-row INSERT … ON DUPLICATE KEY UPDATE scope = scope, one statement and one
//     commit for all. When it inserts fewer rows than it carries (a record existed, or two callers
//     claimed one key in the same batch), each claim asks whether the row carries its own owner token
//     (random per attempt, see Record.Owner): only the claim that inserted it finds it.
//   - Finishes (a claim's own write: same fence and owner; on a pool that takes multi-statement
//     packets, see Options.NoMultiStatements — elsewhere each leaves on its own): one packet "START
//     TRANSACTION; UPDATE …; SET @idemkit_n<i> = ROW_COUNT(); …; SELECT @idemkit_n0, …; COMMIT" on a
//     connection the Store holds: one round trip
//     and one commit for all, and each finish's own count of changed rows, read as Update reads its
//     own. The server stops a packet at its first error, so an error it answers means nothing was
//     committed (the COMMIT did not run, or refused) — but for one that kills the connection (1927,
//     KILL CONNECTION), which can come after the COMMIT ran, in place of its answer.
//   - Reads before a Tx-mode function (BeginTxGet, on a multi-statement pool): one SELECT of the
//     records by primary key, outside any transaction, instead of a probe in each transaction (see
//     probeMany). A lone read keeps the probe that leaves with START TRANSACTION.
//
// A batch runs until the latest deadline among its callers, Options.BatchTimeout after it leaves
// standing in for a caller without one (see bounded for one that goes out alone): a connection that
// went silent holds up every write queued behind it only that long.
//
// Either way every write keeps its own outcome and its own conditions: nothing a caller sees differs
// from its statement run alone. When the batch statement fails (a deadlock, a data error, the server's
// refusal of the COMMIT) nothing of it was committed, and each write runs again on its own; when the
// error killed the connection it may have come after the commit, and a finish that runs again then
// finds its own write in place and succeeds (see finishAgain). When its
// outcome is not known (the connection broke after the statement was sent), each claim runs again on
// its own and is its own when the row carries its token; each finish gets the error, as after a lost
// reply. Values are written as literals (as in the INSERT-and-COMMIT packet of multi.go), so no
// statement is prepared per batch size; a result larger than maxInlineResult is written alone.
//
// Statements in a transaction (a Store bound with WithTx, the record's INSERT in Tx mode) never batch:
// they belong to that transaction. Options.NoBatch turns group commit off.

// probeOp is a read before a Tx-mode function (BeginTxGet) waiting for its batch. Its outcome is
// BeginTxGet's.
type probeOp struct {
	scope, key string
	tx         idemkit.TxStore
	rec        *idemkit.Record
	err        error
}

// claimOp is a claim waiting for its batch. It holds a copy of the caller's record: a caller whose
// context ended returns while its claim may still be out in a batch.
type claimOp struct {
	rec *idemkit.Record // &own
	own idemkit.Record
	err error
}

// finishOp is a finish waiting for its batch. Its outcome is that of its statement alone: the rows
// it changed (MySQL counts changed rows) or the database's error, for Update to interpret.
type finishOp struct {
	rec  *idemkit.Record // &own, a copy of the caller's record (see claimOp)
	own  idemkit.Record
	prev idemkit.Version
	n    int64
	err  error
}

// newBatchers sets up s's group commit.
func (s *Store) newBatchers() {
	s.claims = batch.New(1, batch.Funcs[*claimOp]{
		One: func(ctx context.Context, op *claimOp) {
			if err := ctx.Err(); err != nil { // its caller left while it waited for its turn
				op.err = s.notSent(err)
				return
			}
			ctx, cancel := s.bounded(ctx)
			defer cancel()
			op.err = s.insertAlone(ctx, op.rec)
		},
		Many: s.insertMany,
		Fail: func(op *claimOp, err error) {
			op.err = cmp.Or(op.err, s.q.interpretError("inserting into", &batchError{err}))
		},
		Bound: s.batchTimeout,
	})
	finishes := func(many func(context.Context, []*finishOp)) *batch.Batcher[*finishOp] {
		return batch.New(1, batch.Funcs[*finishOp]{
			One: func(ctx context.Context, op *finishOp) {
				ctx, cancel := s.bounded(ctx)
				defer cancel()
				op.n, op.err = s.finishAlone(ctx, op.rec, op.prev)
			},
			Many:  many,
			Fail:  func(op *finishOp, err error) { op.err = cmp.Or(op.err, error(&batchError{err})) },
			Bound: s.batchTimeout,
		})
	}
	switch {
	case s.q.dialect == dialectPostgres:
		s.finishes = finishes(s.finishesPostgres)
	case s.multiCapable():
		s.probes = batch.New(1, batch.Funcs[*probeOp]{
			One:   func(ctx context.Context, op *probeOp) { op.tx, op.rec, op.err = s.beginProbe(ctx, op.scope, op.key) },
			Many:  s.probeMany,
			Fail:  func(op *probeOp, err error) { op.err = cmp.Or(op.err, error(&batchError{err})) },
			Bound: s.batchTimeout,
		})
		s.finishes = finishes(s.finishMany)
	}
}

// bounded returns ctx bounded by Options.BatchTimeout when it has no deadline: a claim or finish that
// goes out alone holds up every one queued behind it. (A lone read before a Tx-mode function is not
// bounded: it begins the transaction the function runs in, which would end with the bound.)
func (s *Store) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.batchTimeout)
}

// finishAgain runs op's finish alone after its batch failed with the server's error. That error may
// have come after the batch's commit: one that kills the connection (MySQL 1927 from KILL CONNECTION,
// PostgreSQL FATAL 57P01 from pg_terminate_backend or a fast shutdown) can come in place of the
// commit's answer. The finish then matches no row (its record is no longer PROCESSING), and it reads
// whether the record holds exactly what it writes — its fence and owner, its status, result, error
// and times, which only this write leaves — and is written when it does, rather than fenced.
func (s *Store) finishAgain(ctx context.Context, op *finishOp) {
	op.n, op.err = s.finishAlone(ctx, op.rec, op.prev)
	if op.err != nil || op.n > 0 {
		return
	}
	var one int
	r := op.rec
	args := []any{r.Scope, r.Key, r.Fence, r.Owner, string(r.Status), response(r.Response), r.Error,
		millis(r.LeaseUntil), millis(r.ExpiresAt), millis(r.UpdatedAt)}
	switch err := queryOne(ctx, s.c, s.q.written, args, &one); {
	case err == nil:
		op.n = 1
	case !errors.Is(err, sql.ErrNoRows):
		op.err = err
	}
}

// batchError is the error of a write whose batch was abandoned by a panicking sender.
type batchError struct{ err error }

func (e *batchError) Error() string { return "record: " + e.err.Error() }
func (e *batchError) Unwrap() error { return e.err }

// batchable reports whether rec may be written in a batch: its result is small enough to write as a
// literal. (Only a base Store has batchers: a Store bound to a transaction never batches.)
func batchable(rec *idemkit.Record) bool { return len(rec.Response) <= maxInlineResult }

// Bounds of one batch statement: a larger batch is sent as several (max_allowed_packet is 16 MiB by
// default on MariaDB, 64 MiB on MySQL; a result is at most maxInlineResult, twice that in hexadecimal).
const (
	maxBatchRows  = 256
	maxBatchBytes = 1 << 20
)

// chunks calls f with consecutive parts of ops of at most maxBatchRows and, but for a lone op,
// maxBatchBytes as size measures them.
func chunks[T any](ops []T, size func(T) int, f func([]T)) {
	for len(ops) > 0 {
		n, bytes := 1, size(ops[0])
		for n < len(ops) && n < maxBatchRows && bytes+size(ops[n]) <= maxBatchBytes {
			bytes += size(ops[n])
			n++
		}
		f(ops[:n])
		ops = ops[n:]
	}
}

// insertMany inserts the claims of ops in one statement per chunk.
func (s *Store) insertMany(ctx context.Context, ops []*claimOp) {
	chunks(ops, func(op *claimOp) int { return valuesLen(op.rec) }, func(ops []*claimOp) { s.insertChunk(ctx, ops) })
}

// insertChunk inserts the claims of ops in one statement (see the top of this file).
func (s *Store) insertChunk(ctx context.Context, ops []*claimOp) {
	if len(ops) == 1 {
		ops[0].err = s.insertAlone(ctx, ops[0].rec)
		return
	}
	slices.SortFunc(ops, func(a, b *claimOp) int { // one lock order for every batch
		return cmp.Or(strings.Compare(a.rec.Scope, b.rec.Scope), strings.Compare(a.rec.Key, b.rec.Key))
	})
	query, args := s.claimsBuilt(ops)
	n, err := s.c.exec(ctx, query, args...)
	switch {
	case err == nil && n == int64(len(ops)):
		return
	case err == nil:
		for _, op := range ops {
			op.err = s.claimed(ctx, op.rec, idemkit.ErrExists)
		}
	default:
		for _, op := range ops {
			op.err = s.insertAlone(ctx, op.rec)
			if errors.Is(op.err, idemkit.ErrExists) {
				// The batch may have inserted it before its connection broke.
				op.err = s.claimed(ctx, op.rec, op.err)
			}
		}
	}
}

// claimed returns nil when the record of rec carries rec's version (its owner token: the claim that
// inserted it), and notFound otherwise.
func (s *Store) claimed(ctx context.Context, rec *idemkit.Record, notFound error) error {
	switch err := s.confirm(ctx, rec.Scope, rec.Key, rec.Version()); {
	case err == nil:
		return nil
	case errors.Is(err, idemkit.ErrFenced):
		return notFound
	default:
		return err
	}
}

// insertRows returns the multi-row INSERT of the claims of ops.
func (q *queries) insertRows(ops []*claimOp) string {
	size := len(q.insertCommitPfx) + len(insertRowsSfx)
	for _, op := range ops {
		size += valuesLen(op.rec) + len("), (")
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(q.insertCommitPfx)
	for i, op := range ops {
		if i > 0 {
			b.WriteString("), (")
		}
		writeValues(&b, op.rec)
	}
	b.WriteString(insertRowsSfx)
	return b.String()
}

// insertRowsSfx ends a multi-row INSERT of claims: a row whose key exists is left unchanged, and
// not counted.
const insertRowsSfx = ") ON DUPLICATE KEY UPDATE scope = scope"

// finishMany writes the finishes of ops in one transaction per chunk.
func (s *Store) finishMany(ctx context.Context, ops []*finishOp) {
	chunks(ops, finishLen, func(ops []*finishOp) { s.finishChunk(ctx, ops) })
}

// finishChunk writes the finishes of ops in one transaction (see the top of this file).
func (s *Store) finishChunk(ctx context.Context, ops []*finishOp) {
	alone := func() {
		for _, op := range ops {
			op.n, op.err = s.finishAlone(ctx, op.rec, op.prev)
		}
	}
	if len(ops) == 1 {
		alone()
		return
	}
	c, err := s.multiConnection(ctx)
	if c == nil || err != nil {
		alone()
		return
	}
	handled := false
	defer func() {
		if !handled { // a panic below: the connection may hold the batch's open transaction
			discard(c)
		}
	}()
	slices.SortFunc(ops, func(a, b *finishOp) int {
		return cmp.Or(strings.Compare(a.rec.Scope, b.rec.Scope), strings.Compare(a.rec.Key, b.rec.Key))
	})
	mayHaveRun, err := s.sendFinishes(ctx, c, ops)
	handled = true
	switch _, server := mysqlErrorNumber(err); {
	case err == nil:
		_ = c.Close()
	case server:
		// The server stopped at a failing statement before the COMMIT, or refused the COMMIT:
		// nothing was committed. Or it killed the connection (1927), maybe after the COMMIT ran.
		s.endBatch(ctx, c)
		for _, op := range ops {
			s.finishAgain(ctx, op)
		}
	case !mayHaveRun || errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrPktTooLarge):
		// Nothing was sent (a context that ended first, a connection found broken before writing,
		// a packet over max_allowed_packet): nothing ran.
		discard(c)
		alone()
	default:
		// The packet's COMMIT may have run: each finish's outcome is unknown, as after a lost reply.
		discard(c)
		for _, op := range ops {
			op.n, op.err = 0, err
		}
	}
}

// sendFinishes sends the packet of ops' finishes on c and reads each one's count of changed rows.
// When it fails it reports whether the COMMIT may have run: the packet was written (not when the
// server's error came, which stops the packet before the COMMIT, nor when nothing was sent).
func (s *Store) sendFinishes(ctx context.Context, c *sql.Conn, ops []*finishOp) (mayHaveRun bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	rows, err := c.QueryContext(ctx, s.q.finishRows(ops))
	if err != nil {
		return true, err
	}
	defer rows.Close()
	if !rows.Next() {
		return true, cmp.Or(rows.Err(), errors.New("the counts of changed rows did not come"))
	}
	counts := make([]any, len(ops))
	for i, op := range ops {
		counts[i] = &op.n
	}
	if err := rows.Scan(counts...); err != nil {
		return true, err
	}
	// The COMMIT's answer comes after the counts. When the deadline closed the rows first, Close
	// says nothing and Err has the error: the COMMIT's outcome is then unknown.
	return true, cmp.Or(rows.Close(), rows.Err())
}

// probeMany reads the records of ops in one statement per chunk, outside any transaction: what
// BeginTxGet reads in the transaction it begins when alone. A record found is the op's; for a key
// without one the op gets idemkit.ErrNotFound and no transaction, and the Guard begins it (with
// BeginTx, whose START TRANSACTION leaves with the function's first statement). The read comes
// before the transaction rather than in it, which changes nothing the Guard relies on: a record
// committed after it is met by the record's INSERT at the commit, as one committed after the read in
// the transaction is.
func (s *Store) probeMany(ctx context.Context, ops []*probeOp) {
	// Even a chunk of one is read here, without a transaction: a caller whose context ended may have
	// left already, and would leave a transaction begun for it open.
	chunks(ops, func(op *probeOp) int { return 2*(len(op.scope)+len(op.key)) + len(probeOr) }, func(ops []*probeOp) {
		if err := s.readMany(ctx, ops); err != nil {
			for _, op := range ops {
				op.err = s.q.interpretError("reading", err)
			}
		}
	})
}

// readMany reads the records of ops in one statement and gives each op its own.
func (s *Store) readMany(ctx context.Context, ops []*probeOp) error {
	rows, err := s.c.query(ctx, s.q.readRows(ops))
	if err != nil {
		return err
	}
	defer rows.Close()
	found := make(map[[2]string]*idemkit.Record, len(ops))
	for rows.Next() {
		rec := new(idemkit.Record)
		var c recordColumns
		if err := rows.Scan(append([]any{&rec.Scope, &rec.Key}, c.dest(rec)...)...); err != nil {
			return err
		}
		c.fill(rec)
		found[[2]string{rec.Scope, rec.Key}] = rec
	}
	// A read cut short (an error mid-result, the deadline) must not leave the keys not read yet
	// "not found": their businesses would run before their records are seen.
	if err := cmp.Or(rows.Err(), rows.Close()); err != nil {
		return err
	}
	for _, op := range ops {
		if rec, ok := found[[2]string{op.scope, op.key}]; ok {
			cp := *rec // each op its own copy: duplicates may share a batch
			cp.Response = bytes.Clone(rec.Response)
			op.rec = &cp
		} else {
			op.err = idemkit.ErrNotFound
		}
	}
	return nil
}

// readRows returns the read of the records of ops by primary key.
func (q *queries) readRows(ops []*probeOp) string {
	size := len(q.readRowsPfx)
	for _, op := range ops {
		size += 2*(len(op.scope)+len(op.key)) + len(probeOr)
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(q.readRowsPfx)
	for i, op := range ops {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(scope = ")
		hexLiteral(&b, "", op.scope)
		b.WriteString(" AND idem_key = ")
		hexLiteral(&b, "", op.key)
		b.WriteString(")")
	}
	return b.String()
}

// probeOr is the fixed text of one key in readRows, for sizing.
const probeOr = " OR (scope = X'' AND idem_key = X'')"

// endBatch rolls back the batch's transaction on c and returns c to the pool, or closes it when the
// server does not answer.
func (s *Store) endBatch(ctx context.Context, c *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	if _, err := c.ExecContext(ctx, "ROLLBACK"); err != nil {
		discard(c)
		return
	}
	_ = c.Close()
}

// finishRows returns the packet of the finishes of ops: START TRANSACTION, each UPDATE followed by
// the saving of its count of changed rows, the SELECT of the counts, and COMMIT.
func (q *queries) finishRows(ops []*finishOp) string {
	size := len(beginPrefix) + len("SELECT ; COMMIT")
	for _, op := range ops {
		size += len(q.finishPfx) + finishLen(op)
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(beginPrefix)
	for i, op := range ops {
		q.writeFinish(&b, op.rec, op.prev)
		b.WriteString("; SET @idemkit_n")
		writeInt(&b, int64(i))
		b.WriteString(" = ROW_COUNT(); ")
	}
	b.WriteString("SELECT ")
	for i := range ops {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("@idemkit_n")
		writeInt(&b, int64(i))
	}
	b.WriteString("; COMMIT")
	return b.String()
}

// writeFinish writes the UPDATE of a claim's own write of rec over prev (see [Store.finishAlone]) with
// literals.
func (q *queries) writeFinish(b *strings.Builder, r *idemkit.Record, prev idemkit.Version) {
	b.WriteString(q.finishPfx)
	hexLiteral(b, textIntroducer, string(r.Status))
	b.WriteString(", response = ")
	writeResponse(b, r.Response)
	b.WriteString(", error = ")
	hexLiteral(b, textIntroducer, r.Error)
	b.WriteString(", lease_until = ")
	writeInt(b, millis(r.LeaseUntil))
	b.WriteString(", expires_at = ")
	writeInt(b, millis(r.ExpiresAt))
	b.WriteString(", updated_at = ")
	writeInt(b, millis(r.UpdatedAt))
	b.WriteString(" WHERE scope = ")
	hexLiteral(b, "", r.Scope)
	b.WriteString(" AND idem_key = ")
	hexLiteral(b, "", r.Key)
	b.WriteString(" AND fence = ")
	writeInt(b, prev.Fence)
	b.WriteString(" AND owner = ")
	hexLiteral(b, textIntroducer, prev.Owner)
	b.WriteString(" AND status = ")
	hexLiteral(b, textIntroducer, string(prev.Status))
}

// finishOne returns the UPDATE of one claim's own write, with literals.
func (q *queries) finishOne(rec *idemkit.Record, prev idemkit.Version) string {
	var b strings.Builder
	b.Grow(len(q.finishPfx) + finishSize(rec, prev))
	q.writeFinish(&b, rec, prev)
	return b.String()
}

// finishLen bounds the length of op's part of a finish packet, after finishPfx.
func finishLen(op *finishOp) int { return finishSize(op.rec, op.prev) }

// finishSize bounds the length of the finish of rec over prev as writeFinish writes it, after
// finishPfx, and of what a finish packet adds to it.
func finishSize(rec *idemkit.Record, prev idemkit.Version) int {
	return len(finishLiteralCols) + 2*(len(rec.Status)+len(rec.Response)+len(rec.Error)+
		len(rec.Scope)+len(rec.Key)+len(prev.Owner)+len(prev.Status)) + 6*len("_utf8mb4 X''") + 4*20 +
		2*len("; SET @idemkit_n0000 = ROW_COUNT(); ")
}

// finishLiteralCols is the fixed text of a finish after finishPfx, for sizing.
const finishLiteralCols = ", response = , error = , lease_until = , expires_at = , updated_at =  WHERE scope =  AND idem_key =  AND fence =  AND owner =  AND status = "
