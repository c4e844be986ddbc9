package barrier

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/ownedtx"
	"github.com/idemkit/idemkit/internal/pgddl"
	"github.com/idemkit/idemkit/record"
)

// GormOptions configure a [Gorm] barrier. The zero value works.
type GormOptions struct {
	// Table is the barrier table, "table" or "schema.table", each part an unquoted SQL identifier
	// (letters, digits, underscore; at most 63 bytes, the table itself at most 51). Defaults to
	// DefaultTable ("dtm_barrier.barrier") on MySQL/MariaDB and PostgreSQL and DefaultSQLiteTable
	// ("barrier") on SQLite. To share the table with dtmcli, keep it lowercase (dtmcli does not quote
	// it), and on PostgreSQL name it "barrier" in its schema: CreateTable names the unique constraint
	// uniq_<table>, and dtmcli's insert names uniq_barrier.
	Table string
}

// Gorm is the branch barrier for business data in MySQL/MariaDB, PostgreSQL or SQLite, reached through
// gorm. It is safe for concurrent use.
type Gorm struct {
	db *gorm.DB
	d  *dialect
	// enc is the client_encoding check of db's pool on PostgreSQL (see checkEncoding); nil elsewhere.
	enc *pgddl.EncodingCheck
}

// NewGorm returns a barrier on db's database. db must be a database handle, not a transaction; its
// dialector decides the SQL (mysql, postgres or sqlite). It returns an error for another dialect, a
// transaction handle or an invalid table name.
//
// On PostgreSQL the barrier checks, with SHOW, that the sessions exchange text in UTF-8
// (client_encoding UTF8, or SQL_ASCII on a UTF8 database) before its first statement on db, again
// after a check that failed, and at every [Gorm.Enter] in a transaction of another gorm.DB: the driver
// sends text as UTF-8 and the server converts it from the session's client_encoding, so on a LATIN1
// session a gid "g-é" would be stored as "g-Ã©", another branch than a UTF8 session's. Enter and
// QueryPrepared fail on other sessions with an error naming client_encoding.
func NewGorm(db *gorm.DB, opts *GormOptions) (*Gorm, error) {
	if db == nil || db.Dialector == nil || db.Statement == nil {
		return nil, errors.New("barrier: nil or unopened *gorm.DB")
	}
	if _, ok := db.Statement.ConnPool.(gorm.TxCommitter); ok {
		return nil, errors.New("barrier: NewGorm needs the database handle, not a transaction")
	}
	var o GormOptions
	if opts != nil {
		o = *opts
	}
	d, err := newDialect(db.Dialector.Name(), o.Table)
	if err != nil {
		return nil, err
	}
	g := &Gorm{db: db, d: d}
	if db.Dialector.Name() == "postgres" {
		g.enc = new(pgddl.EncodingCheck)
	}
	return g, nil
}

// checkEncoding returns an error when pool, a session of the gorm.DB whose configuration is cfg, is
// on PostgreSQL and does not exchange text with the server in UTF-8: its gids and ops would be
// stored converted, another branch than a UTF8 session's (see pgddl.EncodingCheck). The sessions of
// the barrier's own database are checked once (again after a check that failed), another database's
// at every call.
func (g *Gorm) checkEncoding(ctx context.Context, cfg *gorm.Config, pool gorm.ConnPool) error {
	if g.enc == nil {
		return nil
	}
	check := g.enc
	if cfg == nil || cfg.ConnPool != g.db.Config.ConnPool {
		check = new(pgddl.EncodingCheck)
	}
	err := check.Check(ctx, func(ctx context.Context, setting string) (string, error) {
		var v string
		err := queryOne(ctx, pool, &v, "SHOW "+setting)
		return v, err
	})
	if err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	return nil
}

// CreateTable creates the barrier table (and its database on MySQL or schema on PostgreSQL when the name
// is qualified) if it does not exist, with DTM's schema (on MySQL/MariaDB the unique key's columns are
// VARBINARY, so gids compare byte for byte, as everywhere else). The sql/ directory holds the same
// DDL. Several processes may run it at once (the replicas of a service starting together), and on a table that
// exists it waits for no branch transaction open on it: on PostgreSQL the index is looked for before
// it is created, since CREATE INDEX IF NOT EXISTS locks the table (and every later insert behind it)
// first.
//
// It returns [Gorm.CheckKeyColumns]'s error, and creates nothing, when the table exists with a gid,
// branch_id, op or barrier_id column that does not tell every two values apart (a MySQL/MariaDB table
// made from DTM's own DDL, whose VARCHAR columns compare case-insensitively; a collation changed by a
// migration tool; a SQLite column declared COLLATE NOCASE), or, on MySQL/MariaDB, without a unique
// key on exactly those four columns or in an engine without transactions (MyISAM, Aria, MEMORY):
// CREATE TABLE IF NOT EXISTS would keep such a table.
func (g *Gorm) CreateTable(ctx context.Context) error {
	if err := g.CheckKeyColumns(ctx); err != nil {
		return err
	}
	for _, stmt := range g.d.ddl {
		if g.d.indexExists != "" && strings.HasPrefix(stmt, "CREATE INDEX") {
			var n int
			err := queryOne(ctx, g.db.Statement.ConnPool, &n, g.d.indexExists, g.d.quoted, g.d.index)
			if err != nil {
				return fmt.Errorf("barrier: creating table: looking for its index %s: %w", g.d.index, err)
			}
			if n > 0 {
				continue
			}
		}
		if err := g.execDDL(ctx, stmt); err != nil {
			return fmt.Errorf("barrier: creating table: %w", err)
		}
	}
	return nil
}

// execDDL runs one CREATE ... IF NOT EXISTS statement of CreateTable. On PostgreSQL one that lost a
// race with the same statement of another session runs again (package internal/pgddl).
func (g *Gorm) execDDL(ctx context.Context, stmt string) error {
	for attempt := 0; ; attempt++ {
		err := g.db.WithContext(ctx).Exec(stmt).Error
		if err == nil || !g.d.createRaces || attempt == pgddl.RaceRetries || ctx.Err() != nil || !lostCreateRace(err) {
			return err
		}
	}
}

// lostCreateRace reports whether err is a CREATE ... IF NOT EXISTS's lost race (package
// internal/pgddl), also as gorm.ErrDuplicatedKey when the handle translates errors.
func lostCreateRace(err error) bool {
	return errors.Is(err, gorm.ErrDuplicatedKey) || pgddl.LostCreateRace(err)
}

// queryOne scans the first row query returns on pool into dest, or returns sql.ErrNoRows. It asks
// QueryContext, not QueryRowContext: gorm's prepared pools (PrepareStmt) answer a QueryRowContext whose
// prepare failed — the context ended, the connection broke — with an empty sql.Row, whose Scan panics.
func queryOne(ctx context.Context, pool gorm.ConnPool, dest any, query string, args ...any) error {
	rows, err := pool.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		return cmp.Or(rows.Err(), sql.ErrNoRows)
	}
	if err := rows.Scan(dest); err != nil {
		return err
	}
	return rows.Close()
}

// txPool returns tx's connection after checking that tx is inside a transaction.
func txPool(tx *gorm.DB) (gorm.ConnPool, error) {
	if tx == nil || tx.Statement == nil {
		return nil, ErrNoTransaction
	}
	if tx.Error != nil {
		return nil, fmt.Errorf("barrier: transaction handle carries an error: %w", tx.Error)
	}
	if _, ok := tx.Statement.ConnPool.(gorm.TxCommitter); !ok {
		return nil, ErrNoTransaction
	}
	return tx.Statement.ConnPool, nil
}

// Enter records the branch call b in tx and reports whether the business must run (Proceed) or not
// (Duplicate, Hanging, NullCompensation). It is the primitive under [Gorm.Call]: run the business in tx
// only when the outcome is Proceed, then commit tx; when the business fails, roll tx back so the barrier
// rows go with it.
//
// tx must be inside a transaction on the barrier's database (db.Begin(), the argument of
// db.Transaction, with or without PrepareStmt); Enter never commits or rolls it back. Statements
// run on tx's connection with ctx and bypass gorm's callbacks. For a compensating op Enter inserts
// the origin row and the current row with two statements, as DTM does: on PostgreSQL in DTM's
// order, origin first, on MySQL/MariaDB in the order of the table's unique key, so that concurrent
// deliveries of one op wait for each other instead of deadlocking there (a dtmcli delivery of the
// same op at the same moment still may on MySQL/MariaDB; it is retried; on PostgreSQL neither
// deadlocks); otherwise one. On MySQL/MariaDB two deliveries that wait for the row of a third one,
// which then rolls back (a slow action that failed, or whose caller gave up, with its compensation
// delivered twice, or with the compensation and a redelivery of the action waiting), still deadlock,
// as InnoDB's inserts of one duplicate key do: the database rolls one of the transactions back whole
// (error 1213). [Gorm.TransactionOutcome] runs its transaction again then; a caller's own
// transaction must be run again from its start. Only a repeated delivery costs one more statement,
// to tell Duplicate from Hanging (and on PostgreSQL the first call, or every call in a transaction
// of another gorm.DB than the barrier's, one SHOW: see [NewGorm]); it sees a row committed after
// the caller's snapshot (on MySQL/MariaDB a locking read; on PostgreSQL a plain one, so that the
// barrier needs no privilege on its table but SELECT and INSERT, as dtmcli's does). A PostgreSQL
// transaction is never aborted by an insert conflicting on the branch's unique key (ON CONFLICT
// (gid, branch_id, op, barrier_id) DO NOTHING); any other conflict is an error, never taken for a
// repeated delivery.
//
// Enter returns ErrInvalidBranch, ErrNoTransaction, ErrDuplicate (with Duplicate) for a repeated msg op,
// or the database error. When it returns an error, b's barrier count is as it was before the call, as
// after [Gorm.TransactionOutcome]: a caller that rolls tx back and retries with the same b (a deadlock,
// PostgreSQL's serialization failure in REPEATABLE READ or SERIALIZABLE) uses the same barrier id, so
// its rows meet the delivery that made the call fail, and a later redelivery meets its rows.
//
// A call that returned without an error has counted its id, also when tx fails after it — at a later
// statement, or at its COMMIT (PostgreSQL's serialization failure in SERIALIZABLE or a deferred
// constraint, a Galera certification conflict, a lost connection) — and Enter cannot tell the retry of
// that transaction from the handler's next one. Restore b before running tx again: copy it before
// tx (saved := *b) and set it back before the retry (*b = saved). Run again with b as it was left,
// the retry commits its rows under the next id, and a redelivery (a new Branch, from the first id)
// runs the business a second time. [Gorm.TransactionOutcome] restores b itself.
func (g *Gorm) Enter(ctx context.Context, tx *gorm.DB, b *Branch) (_ Outcome, err error) {
	if err := g.validate(b); err != nil {
		return 0, err
	}
	pool, err := txPool(tx)
	if err != nil {
		return 0, err
	}
	if err := g.checkEncoding(ctx, tx.Config, pool); err != nil {
		return 0, err
	}
	calls := b.calls
	defer func() {
		if err != nil {
			b.calls = calls // the caller rolls tx back; a retry with b uses the same id (see TransactionOutcome)
		}
	}()
	bid := b.nextBarrierID()
	// On MySQL/MariaDB the rows go in the order of the unique key (gid, branch_id, op, barrier_id), where
	// only op differs. In DTM's order, origin first, a TCC cancel deadlocks there with another delivery
	// of it or with its try: it inserts (or takes a shared next-key lock on) the try row, and then
	// inserts its cancel row, which sorts before it, into the gap the other delivery, waiting on the try
	// row, holds or asks for. PostgreSQL locks no gaps, only the rows inserted: there every delivery
	// inserts in DTM's order, origin first, so that none deadlocks with a dtmcli delivery of the op
	// (the key's order did: each held the row the other inserted next).
	origin := OriginOp(b.Op)
	originFirst := origin != "" && (g.d.originFirst || origin < b.Op) // action before compensate or rollback
	var affected, originAffected int64
	if originFirst {
		if originAffected, err = g.insert(ctx, pool, b, origin, bid); err != nil {
			return 0, err
		}
	}
	if affected, err = g.insert(ctx, pool, b, b.Op, bid); err != nil {
		return 0, err
	}
	if origin != "" && !originFirst { // cancel before try
		if originAffected, err = g.insert(ctx, pool, b, origin, bid); err != nil {
			return 0, err
		}
	}
	switch {
	case affected > 0 && originAffected > 0:
		return NullCompensation, nil
	case affected > 0:
		return Proceed, nil
	case b.Op == OpMsg:
		return Duplicate, ErrDuplicate
	}
	var reason string
	err = queryOne(ctx, pool, &reason, g.d.reason, b.Gid, b.BranchID, b.Op, bid)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// The insert stored nothing, yet no row holds the branch's key (the read sees the latest
		// commit): the insert was refused by something else. Never a Duplicate, which
		// would skip a business that never ran and answer DTM success.
		return 0, fmt.Errorf("barrier: the %s row of %s was not inserted, yet no such row exists: the insert met another conflict or error (one MySQL's INSERT IGNORE ignores)", b.Op, b)
	case err != nil:
		return 0, fmt.Errorf("barrier: reading barrier row of %s: %w", b, err)
	case reason != "" && reason != b.Op:
		return Hanging, nil
	}
	return Duplicate, nil
}

// validate checks b as [Branch.Validate] does, and for the database: PostgreSQL text refuses NUL in
// every insert, so such a branch would fail each delivery (and each back-check) forever.
func (g *Gorm) validate(b *Branch) error {
	if err := b.Validate(); err != nil {
		return err
	}
	if g.d.noNUL && strings.IndexByte(b.TransType+b.Gid+b.BranchID+b.Op, 0) >= 0 {
		return fmt.Errorf("%w: %s holds a NUL byte, which PostgreSQL text refuses", ErrInvalidBranch, b)
	}
	return nil
}

func (g *Gorm) insert(ctx context.Context, pool gorm.ConnPool, b *Branch, op, bid string) (int64, error) {
	res, err := pool.ExecContext(ctx, g.d.insert, b.TransType, b.Gid, b.BranchID, op, bid, b.Op)
	if err != nil {
		return 0, fmt.Errorf("barrier: inserting %s row of %s: %w", op, b, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("barrier: inserting %s row of %s: %w", op, b, err)
	}
	return n, nil
}

// Call runs fn in tx behind the barrier: fn runs only on the first delivery of b, and its writes commit
// or roll back with the barrier rows when the caller ends tx. Call never commits or rolls back tx; when
// it or fn returns an error, or fn panics, the caller must roll tx back (db.Transaction does). A panic in
// fn propagates. fn receives tx with ctx.
//
// Call returns nil without running fn for a duplicate, hanging or null-compensation delivery, fn's
// error, or the errors of [Gorm.Enter]. When it returns an error, b's barrier count is as it was before
// the call (see [Gorm.Enter]), so a retry of tx with the same b uses the same barrier id; so it is
// after a panic in fn, for a caller that recovers it and runs tx again. When tx fails after Call
// returned nil (at its COMMIT, say), restore b before the retry: see [Gorm.Enter]. fn must return the
// error of a statement that failed: on MySQL/MariaDB a deadlock rolls tx back whole, the barrier rows
// with it, and a caller that commits after it commits only what ran since, without them
// ([Gorm.Transaction] refuses that for its own transaction).
func (g *Gorm) Call(ctx context.Context, tx *gorm.DB, b *Branch, fn func(tx *gorm.DB) error) error {
	_, err := g.CallOutcome(ctx, tx, b, fn)
	return err
}

// CallOutcome is [Gorm.Call] that also reports the barrier's decision.
func (g *Gorm) CallOutcome(ctx context.Context, tx *gorm.DB, b *Branch, fn func(tx *gorm.DB) error) (Outcome, error) {
	calls := 0
	if b != nil {
		calls = b.calls
	}
	out, err := g.Enter(ctx, tx, b)
	if err != nil || out != Proceed {
		return out, err
	}
	done := false
	defer func() {
		if !done { // fn failed or panicked: the caller rolls tx back, as after Enter's error
			b.calls = calls
		}
	}()
	if err := fn(tx.WithContext(ctx)); err != nil {
		return Proceed, err
	}
	done = true
	return Proceed, nil
}

// Transaction opens a transaction on the barrier's database, runs [Gorm.Call] in it and commits; on an
// error it rolls back and returns the error, on a panic it rolls back and re-panics (gorm's
// db.Transaction), b's barrier count restored as after an error; one the database rolled back on a write conflict before fn ran is run again (see
// [Gorm.TransactionOutcome]). It is the equivalent of dtmcli's BranchBarrier.CallWithDB.
func (g *Gorm) Transaction(ctx context.Context, b *Branch, fn func(tx *gorm.DB) error) error {
	_, err := g.TransactionOutcome(ctx, b, fn)
	return err
}

// TransactionOutcome is [Gorm.Transaction] that also reports the barrier's decision.
//
// When the database rolled the transaction back on a write conflict before fn ran — a MySQL/MariaDB
// deadlock of the barrier's inserts (see [Gorm.Enter]), a PostgreSQL deadlock or serialization
// failure — it runs the transaction again, up to 3 times: nothing of the caller's ran, and the run
// again meets the rows of the delivery that won. A conflict after fn ran is returned.
//
// fn's session runs its statements in the transaction but refuses to end it (its Commit, Rollback,
// and raw COMMIT or ROLLBACK statements fail: see record.Sealed). After a statement whose error ended
// the transaction on the server — on MySQL/MariaDB a deadlock rolls it back whole, the barrier rows
// with it, and leaves the connection outside any transaction — the session refuses every later
// statement, and a fn that returns nil all the same fails the transaction with an error wrapping
// record.ErrTxAborted: nothing of it commits and the delivery is not answered done (a business that
// ignored the error would otherwise have its later writes commit one by one, without the barrier
// rows that make a redelivery skip it).
//
// When it returns an error, b's barrier count is as it was before the call, so a retry of the call
// with the same b (a transient error, retried within the request) uses the same barrier id: its
// rows, rolled back, are written again — or, if a lost COMMIT had stored them, found — and a later
// redelivery, whose new Branch starts from the first id, meets them. Counted on, the retry would
// commit under the next id and the redelivery run the business a second time.
func (g *Gorm) TransactionOutcome(ctx context.Context, b *Branch, fn func(tx *gorm.DB) error) (Outcome, error) {
	calls := 0
	if b != nil {
		calls = b.calls
	}
	for attempt := 0; ; attempt++ {
		var out Outcome
		ran := false // fn was called: its effects outside the transaction may have happened
		// On a connection of its own (package internal/ownedtx): one whose COMMIT or ROLLBACK failed
		// is never returned to the pool with the transaction still open on the server.
		err := ownedtx.Transaction(ctx, g.db, func(tx *gorm.DB) error {
			var err error
			out, err = g.CallOutcome(ctx, tx, b, func(tx *gorm.DB) error {
				ran = true
				biz, lost := record.Watched(tx)
				if err := fn(biz); err != nil {
					return err
				}
				// fn ignored the error of a statement that ended the transaction (a MySQL/MariaDB
				// deadlock rolled it back, the barrier rows with it): the COMMIT would succeed with
				// nothing in it, and a redelivery run the business again.
				return lost()
			})
			return err
		})
		if err == nil {
			return out, nil
		}
		if b != nil {
			b.calls = calls
		}
		if ran || !ownedtx.RunAgain(ctx, attempt, ownedtx.Conflict(err)) {
			return out, err
		}
	}
}

// DeleteOlder deletes at most limit barrier rows created before before (limit <= 0 means
// DefaultDeleteBatch), oldest first, in one statement of its own, and returns how many it deleted. A
// sweeper calls it again while it returns limit. Keep before older than the longest a global transaction
// can take to finish (DTM's data expiry defaults to 7 days): a compensation delivered after its rows are
// gone would run as a null compensation, and a late try after its cancel's rows are gone would run.
//
// Rows with a NULL create_time (written by dtmcli into DTM's PostgreSQL table, which has no default)
// are never deleted. It returns the database error, wrapped.
func (g *Gorm) DeleteOlder(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		limit = DefaultDeleteBatch
	}
	res, err := g.db.Statement.ConnPool.ExecContext(ctx, g.d.deleteOlder, g.d.beforeArg(before), limit)
	if err != nil {
		return 0, fmt.Errorf("barrier: deleting rows before %s: %w", before.Format(time.RFC3339), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("barrier: deleting rows before %s: %w", before.Format(time.RFC3339), err)
	}
	return int(n), nil
}

// Table returns the barrier table name as configured.
func (g *Gorm) Table() string { return g.d.table }
