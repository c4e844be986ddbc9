package record

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/ownedtx"
)

// Multi-statement transactions (MySQL and MariaDB only).
//
// When the connection allows several statements in one packet (DSN multiStatements=true), a
// transaction the Store begins for [idemkit.Guard.Tx] runs on a connection the Store holds (a
// *sql.Conn) instead of a *sql.Tx, so that the record's INSERT and the COMMIT leave in one packet:
// one round trip fewer per guarded transaction, the last one of the business's commit. database/sql
// cannot do that: its Tx.Commit always sends a COMMIT of its own.
//
// The INSERT in that packet must fail on a duplicate, or the COMMIT after it would commit the
// business's writes for a key another attempt finished. A plain INSERT fails (error 1062) but only
// share-locks the existing row, and two duplicates that then both read it for update deadlock. So the
// INSERT keeps the exclusive lock of ON DUPLICATE KEY UPDATE and makes its update branch fail: it
// adds 1 + 2⁶⁴−1 to the fence, an arithmetic overflow MySQL and MariaDB refuse whatever the sql_mode
// (error 1690). The server stops a packet at its first failing statement, so the COMMIT does not run;
// the transaction stays open, holding the row, and the Guard reads the record and replays, rolls
// back or takes over as after any conflict.
//
// The packet carries no placeholder: every value is written as a literal, strings and bytes in
// hexadecimal (X'…', with the utf8mb4 introducer for the text columns), numbers in decimal, so no
// escaping, sql_mode or connection character set is involved, and interpolateParams is not needed.
// A result larger than maxInlineResult is written the ordinary way (hexadecimal doubles its size
// against max_allowed_packet).
//
// The connection goes back to the pool only after a COMMIT or ROLLBACK the server acknowledged; when
// the transaction's state is not known (a statement cut by a cancelled context or a broken
// connection), the connection is closed, and the server rolls back what it held.

// maxInlineResult bounds the results written in the INSERT-and-COMMIT packet.
const maxInlineResult = 64 << 10

// mysqlOutOfRange is ER_DATA_OUT_OF_RANGE: the update branch of the INSERT-and-COMMIT packet met a
// duplicate.
const mysqlOutOfRange = 1690

// Multi-statement support of a Store's pool, found out by the first transaction it begins.
const (
	multiUnknown int32 = iota
	multiOn
	multiOff
)

// errGuardOwned is what a business gets for committing or rolling back the Guard's transaction.
var errGuardOwned = errors.New("record: the Guard commits or rolls back this transaction: return the error from the function instead")

// endTimeout bounds a ROLLBACK sent after the caller's context ended.
const endTimeout = 5 * time.Second

// multiCapable reports whether s may begin multi-statement transactions: a MySQL Store on a plain
// database/sql pool (not gorm's prepared-statement mode) whose options allow it.
func (s *Store) multiCapable() bool {
	return s.q.dialect == dialectMySQL && s.multi != nil && s.sdb != nil && !s.cfg.PrepareStmt &&
		s.gdb.Statement.ConnPool == gorm.ConnPool(s.sdb)
}

// multiConnection takes a connection of the pool for a multi-statement transaction, or returns nil (and no
// error) when the connection does not allow several statements in a packet; it finds that out on its
// first call, with one statement.
func (s *Store) multiConnection(ctx context.Context) (*sql.Conn, error) {
	if s.multi.Load() == multiOff {
		return nil, nil
	}
	c, err := s.sdb.Conn(ctx)
	if err != nil {
		return nil, s.q.interpretError("beginning a transaction on", err)
	}
	if s.multi.Load() == multiUnknown {
		c, err = ownedtx.OnLive(ctx, s.sdb, c, func(c *sql.Conn) error { _, err := c.ExecContext(ctx, "DO 1; DO 1"); return err })
		var my *mysql.MySQLError
		var galera bool
		if err == nil {
			galera, err = isGalera(ctx, c)
		}
		switch {
		case err == nil && galera:
			s.multi.Store(multiOff)
		case err == nil:
			s.multi.Store(multiOn)
		case errors.As(err, &my) && my.Number == mysqlParseError:
			s.multi.Store(multiOff)
		default: // unknown yet: a later transaction asks again
			discard(c)
			return nil, s.q.interpretError("beginning a transaction on", err)
		}
	}
	if s.multi.Load() != multiOn { // found out here, or by a concurrent first transaction
		_ = c.Close()
		return nil, nil
	}
	return c, nil
}

// beginMulti begins a multi-statement transaction, or returns nil when the pool does not allow them.
// START TRANSACTION is not sent here: it leaves with the transaction's first statement (see multiTx).
func (s *Store) beginMulti(ctx context.Context) (*multiStore, error) {
	c, err := s.multiConnection(ctx)
	if c == nil || err != nil {
		return nil, err
	}
	return s.bindMulti(ctx, c, false), nil
}

// bindMulti returns the Store bound to the transaction on c; begun says START TRANSACTION was sent.
func (s *Store) bindMulti(ctx context.Context, c *sql.Conn, begun bool) *multiStore {
	// Statements with arguments may carry START TRANSACTION when the driver interpolates them (the
	// DSN sets interpolateParams: the Store then prepares nothing).
	m := &multiStore{tx: multiTx{c: c, pool: s.sdb, ctx: ctx, leadArgs: s.ps == nil}} // one allocation for both
	m.tx.begun.Store(begun)
	gtx := s.gdb.Session(&gorm.Session{Context: ctx, NewDB: true})
	gtx.Statement.ConnPool = &m.tx
	m.Store = Store{q: s.q, c: &m.tx, inTx: true, gdb: gtx, sdb: s.sdb, ps: s.ps, cfg: s.cfg, multi: s.multi}
	return m
}

// BeginTxGet implements [idemkit.BeginGetter]. On a multi-statement pool (see [Store.BeginTx]) it
// sends START TRANSACTION and a probe for the record in one packet (see probe): when there is
// none it returns the transaction with idemkit.ErrNotFound; when there is one it rolls the
// transaction back and reads the record in one more packet, and returns the record without a
// transaction. The reads are plain ones. Otherwise it reads with [Store.Get] and returns no transaction.
func (s *Store) BeginTxGet(ctx context.Context, scope, key string) (idemkit.TxStore, *idemkit.Record, error) {
	if s.inTx || s.gdb == nil {
		return nil, nil, errors.New("record: BeginTxGet on a Store bound to a transaction")
	}
	if !s.multiCapable() {
		rec, err := s.Get(ctx, scope, key)
		return nil, rec, err
	}
	if s.probes != nil && s.multi.Load() == multiOn {
		op := &probeOp{scope: scope, key: key}
		if err := s.probes.Do(ctx, op); err != nil {
			return nil, nil, s.q.interpretError("reading", err)
		}
		return op.tx, op.rec, op.err
	}
	return s.beginProbe(ctx, scope, key)
}

// beginProbe is BeginTxGet on a multi-statement pool, alone: START TRANSACTION and the probe in one
// packet on a connection it takes.
func (s *Store) beginProbe(ctx context.Context, scope, key string) (idemkit.TxStore, *idemkit.Record, error) {
	c, err := s.multiConnection(ctx)
	if err != nil {
		return nil, nil, err
	}
	if c == nil {
		rec, err := s.Get(ctx, scope, key)
		return nil, rec, err
	}
	rec := &idemkit.Record{Scope: scope, Key: key}
	var found bool
	c, err = ownedtx.OnLive(ctx, s.sdb, c, func(c *sql.Conn) (err error) { found, err = s.probe(ctx, c, rec); return err })
	if err == nil && !found {
		return s.bindMulti(ctx, c, true), nil, idemkit.ErrNotFound
	}
	if err == nil {
		found, err = s.readEnding(ctx, c, rec)
	}
	if err != nil {
		discard(c) // whether the transaction began, or ended, is not known
		return nil, nil, s.q.interpretError("reading", err)
	}
	_ = c.Close() // the transaction ended with the read
	if !found {
		return nil, nil, idemkit.ErrNotFound
	}
	return nil, rec, nil
}

// probe sends START TRANSACTION and a probe for rec's record in one packet on c, and reports whether
// there is one. The probe is SELECT 1: the read of a new key finds nothing, and a result set of one
// constant column costs the server less than the description of the record's twelve columns (about
// 20 µs of MariaDB CPU per transaction at 16 clients, and a dozen allocations here).
func (s *Store) probe(ctx context.Context, c *sql.Conn, rec *idemkit.Record) (bool, error) {
	var one int
	switch err := queryOne(ctx, heldConn{c}, s.q.pkQuery(s.q.beginProbePfx, rec.Scope, rec.Key), nil, &one); {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// readEnding rolls the transaction on c back and reads rec's record, in one packet. A record that is
// there is usually a duplicate's answer (replayed, or refused), and the transaction has nothing to do;
// the Guard begins another to take a record over, whose write is fenced by the version read here. The
// read comes after the ROLLBACK, outside the transaction: the record may have gone since the probe (the
// sweeper), and found is then false. (In the other order an error answering the ROLLBACK, after the
// read's result set, leaves go-sql-driver v1.7 waiting for results that never come, past any context
// deadline; this way an error ends the query itself.)
func (s *Store) readEnding(ctx context.Context, c *sql.Conn, rec *idemkit.Record) (found bool, err error) {
	var cols recordColumns
	switch err := queryOne(ctx, heldConn{c}, s.q.pkQuery(s.q.rollbackGetPfx, rec.Scope, rec.Key), nil, cols.dest(rec)...); {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	}
	cols.fill(rec)
	return true, nil
}

// pkQuery completes prefix, which ends in "WHERE scope = ", with the primary key of scope and key.
func (q *queries) pkQuery(prefix, scope, key string) string {
	var b strings.Builder
	b.Grow(len(prefix) + 2*(len(scope)+len(key)) + 32)
	b.WriteString(prefix)
	hexLiteral(&b, "", scope)
	b.WriteString(" AND idem_key = ")
	hexLiteral(&b, "", key)
	return b.String()
}

// mysqlErrorNumber returns the number of the MySQL server error err is or wraps. The target of
// errors.As escapes to the heap: declared here, it is allocated only for an error, not on every
// statement of the hot path.
func mysqlErrorNumber(err error) (num uint16, ok bool) {
	if err == nil {
		return 0, false
	}
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		return my.Number, true
	}
	return 0, false
}

// mysqlParseError is ER_PARSE_ERROR: what a second statement in a packet gets without multiStatements.
const mysqlParseError = 1064

// mysqlUnknownVariable is ER_UNKNOWN_SYSTEM_VARIABLE: a server without wsrep (MySQL) has no wsrep_on.
const mysqlUnknownVariable = 1193

// isGalera reports whether the server replicates with wsrep (MariaDB Galera Cluster, Percona XtraDB
// Cluster). Multi-statement transactions are not used there. A Guard.Tx storm across Galera nodes
// (internal/cluster.TestGalera) answered two copies of one key with different results through them
// in 3 of 5 runs, and in none of 5 with wsrep_retry_autocommit=0: a transaction brute-force aborted
// while its INSERT-and-COMMIT packet runs appears to have that statement retried on its own, outside
// the rolled-back transaction, and committed — the record without the business's writes, answered as
// a success. Setting that variable would change the application's other statements on the
// connection, so the Store leaves Galera to one statement per packet.
func isGalera(ctx context.Context, c *sql.Conn) (bool, error) {
	var on sql.NullString
	err := c.QueryRowContext(ctx, "SELECT @@wsrep_on").Scan(&on)
	var my *mysql.MySQLError
	switch {
	case errors.As(err, &my) && my.Number == mysqlUnknownVariable:
		return false, nil
	case err != nil:
		return false, err
	}
	return on.String == "1" || strings.EqualFold(on.String, "ON"), nil
}

// discard closes c's connection instead of returning it to the pool.
func discard(c *sql.Conn) {
	if c == nil { // none could be taken (see ownedtx.OnLive)
		return
	}
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.Close()
}

// renew replaces t's connection after err, a statement's on it, when err says the connection was found
// bad before anything was sent (driver.ErrBadConn: see ownedtx.OnLive) and nothing of the transaction
// has run: its first statement then runs again on another connection. It reports whether it did.
func (t *multiTx) renew(ctx context.Context, err error) bool {
	if t.begun.Load() || t.done || !errors.Is(err, driver.ErrBadConn) {
		return false
	}
	if t.retries == 0 {
		t.retries = ownedtx.BadConnRetries + 1 + t.pool.Stats().Idle
	}
	if t.retries == 1 {
		return false
	}
	t.retries--
	_ = t.c.Close() // closed already, by database/sql: its place in the pool is free
	c, err := t.pool.Conn(ctx)
	if err != nil {
		return false // t.c, closed, fails what follows
	}
	t.c = c
	return true
}

// multiTx is a transaction on a connection the Store holds. It is the gorm.ConnPool of the session
// the business gets: its statements run on the connection, and gorm, seeing a committer, turns a
// nested db.Transaction into a savepoint. It is also the bound Store's conn.
//
// START TRANSACTION is deferred: it leads the transaction's first statement in one packet
// ("START TRANSACTION; INSERT …"), whoever sends it — the business, the Store, or the record's
// INSERT-and-COMMIT — so a guarded transaction takes no round trip for its BEGIN. InnoDB takes a
// transaction's snapshot at its first read, not at START TRANSACTION, so nothing else changes. A
// statement that cannot carry it (a prepare; one with arguments when the driver does not interpolate
// them) is preceded by START TRANSACTION on its own. When a statement that carried it fails in a way
// that may have kept START TRANSACTION from running (see ledBy), the transaction begins on its own and
// the statement runs again, alone.
type multiTx struct {
	c        *sql.Conn
	pool     *sql.DB         // c's, for another connection when c is found bad (see renew)
	retries  int             // renew's, left plus one; 0 until the first bad connection
	ctx      context.Context // the context the transaction was begun with
	done     bool            // the connection was returned or closed
	leadArgs bool            // a statement with arguments may carry START TRANSACTION
	begun    atomic.Bool     // START TRANSACTION ran
	lost     txLost          // a statement's error ended the transaction (see Store.WithSealedTx)
	first    sync.Mutex      // held while the first statement runs (statements of a transaction may come concurrently)
}

// GetDBConn names the transaction's pool to gorm (gorm.GetDBConnector), so that the business's tx.DB()
// answers as in a gorm transaction of its own.
func (m *multiTx) GetDBConn() (*sql.DB, error) { return m.pool, nil }

// beginPrefix leads the transaction's first statement.
const beginPrefix = "START TRANSACTION; "

// lead runs a statement of t through run, with START TRANSACTION in front of query when the
// transaction has not begun and the statement can carry it: nargs is its number of arguments, or
// negative for a statement that cannot (a prepare).
func lead[R any](t *multiTx, ctx context.Context, query string, nargs int, run func(query string) (R, error)) (R, error) {
	err := t.lost.check()
	if err == nil {
		// Nor may the business end the transaction itself with a raw statement (see endsTx), or one
		// that commits it implicitly.
		err = endingStatement(query, true)
	}
	if err != nil { // or a deadlock ended the transaction and its error was ignored: run nothing more outside it
		var zero R
		return zero, err
	}
	r, err := leadRun(t, ctx, query, nargs, run)
	return r, t.lost.saw(err)
}

// leadRun is lead once the transaction is known not lost.
func leadRun[R any](t *multiTx, ctx context.Context, query string, nargs int, run func(query string) (R, error)) (R, error) {
	if t.begun.Load() {
		return run(query)
	}
	t.first.Lock()
	defer t.first.Unlock()
	if t.begun.Load() {
		return run(query)
	}
	if nargs < 0 || (nargs > 0 && !t.leadArgs) {
		if err := t.begin(ctx); err != nil {
			var zero R
			return zero, err
		}
		return run(query)
	}
	r, err := run(beginPrefix + query)
	for t.renew(ctx, err) {
		r, err = run(beginPrefix + query)
	}
	if t.ledBy(ctx, err, nargs) {
		return run(query)
	}
	return r, err
}

// begin sends START TRANSACTION on its own. When it fails the connection is closed: whether a
// transaction is open is not known, and every later statement of the transaction fails.
func (t *multiTx) begin(ctx context.Context) error {
	if t.done {
		return sql.ErrConnDone
	}
	_, err := t.c.ExecContext(ctx, "START TRANSACTION")
	for t.renew(ctx, err) {
		_, err = t.c.ExecContext(ctx, "START TRANSACTION")
	}
	if err != nil {
		t.done = true
		discard(t.c)
		return err
	}
	t.begun.Store(true)
	return nil
}

// ledBy settles the transaction's start after a statement with nargs arguments that carried START
// TRANSACTION returned err, and reports whether the statement must run again, alone.
//
// The server runs a packet's statements in order and stops at the first error, so an error the server
// answered for a packet it ran means START TRANSACTION ran. Two failures are not that: the driver
// declined to interpolate the arguments (a '?' inside a literal, an oversize packet) and database/sql
// prepared the two-statement text instead, which the server refuses as a syntax error (1064) without
// running anything; and an error from before anything was sent (an argument database/sql refuses, a
// context already ended) — not a server error at all, while an error after sending closes the
// driver's connection. In those cases START TRANSACTION is sent on its own and the statement runs
// again. Should START TRANSACTION have run after all (the business's own syntax error, with
// arguments), the transaction it opened is empty — the failed statement was its first — and the second
// START TRANSACTION merely replaces it. (@@in_transaction would say, but MySQL does not have it.)
func (t *multiTx) ledBy(ctx context.Context, err error, nargs int) (again bool) {
	if num, ok := mysqlErrorNumber(err); err == nil || (ok && (nargs == 0 || num != mysqlParseError)) {
		t.begun.Store(true)
		return false
	}
	return t.begin(ctx) == nil
}

func (t *multiTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return lead(t, ctx, query, -1, func(query string) (*sql.Stmt, error) { return t.c.PrepareContext(ctx, query) })
}

func (t *multiTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return lead(t, ctx, query, len(args), func(query string) (sql.Result, error) { return t.c.ExecContext(ctx, query, args...) })
}

func (t *multiTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return lead(t, ctx, query, len(args), func(query string) (*sql.Rows, error) { return t.c.QueryContext(ctx, query, args...) })
}

func (t *multiTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	row, _ := lead(t, ctx, query, len(args), func(query string) (*sql.Row, error) {
		row := t.c.QueryRowContext(ctx, query, args...)
		return row, row.Err() // the row carries its error to the caller
	})
	if row == nil { // START TRANSACTION failed and closed the connection: a row saying so
		return t.c.QueryRowContext(ctx, query, args...)
	}
	return row
}

// exec and query make multiTx the conn of the Store bound to it.
func (t *multiTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	return affected(t.ExecContext(ctx, query, args...))
}

func (t *multiTx) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.QueryContext(ctx, query, args...)
}

// Commit and Rollback refuse: the transaction is the Guard's (gorm calls them for db.Commit() and
// db.Rollback() on the business's session).
func (t *multiTx) Commit() error   { return errGuardOwned }
func (t *multiTx) Rollback() error { return errGuardOwned }

// end sends stmt (COMMIT, ROLLBACK, or the INSERT-and-COMMIT packet). When the server did not answer
// (a broken connection, a cancelled context) the state of the transaction is unknown: the connection
// is closed and the error returned. After an answer the caller releases the connection or rolls back.
func (t *multiTx) end(ctx context.Context, stmt string) error {
	if t.done {
		return sql.ErrTxDone
	}
	if err := t.lost.check(); err != nil && stmt != "ROLLBACK" {
		return err // nothing of the transaction is left to commit, nor may the record follow alone
	}
	if !t.begun.Load() {
		stmt = beginPrefix + stmt
	}
	_, err := t.c.ExecContext(ctx, stmt)
	for !t.begun.Load() && t.renew(ctx, err) {
		_, err = t.c.ExecContext(ctx, stmt)
	}
	if _, server := mysqlErrorNumber(err); err != nil && !server {
		t.done = true
		discard(t.c)
		return err
	}
	t.begun.Store(true) // the server answered: START TRANSACTION, first in the packet, ran
	return err
}

// release returns the connection to the pool after the transaction ended.
func (t *multiTx) release() {
	if !t.done {
		t.done = true
		_ = t.c.Close()
	}
}

func (t *multiTx) commit() error {
	if !t.begun.Load() && !t.done { // nothing was sent: nothing to commit
		t.release()
		return nil
	}
	err := t.end(t.ctx, "COMMIT")
	if err != nil && !t.done {
		// The server refused the COMMIT (a Galera certification failure, say): it rolled back.
		t.rollbackQuiet()
	}
	t.release()
	return err
}

func (t *multiTx) rollback() error {
	if t.done {
		return nil
	}
	if !t.begun.Load() { // nothing was sent: nothing to roll back
		t.release()
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), endTimeout)
	defer cancel()
	if err := t.end(ctx, "ROLLBACK"); err != nil {
		if !t.done {
			t.done = true
			discard(t.c)
		}
		return err
	}
	t.release()
	return nil
}

// rollbackQuiet is rollback when the answer does not matter (the server rolled back already).
func (t *multiTx) rollbackQuiet() { _ = t.rollback() }

// multiStore is a Store bound to a multiTx: what BeginTx returns on a multi-statement pool. Its gdb is
// the business's gorm session on the transaction.
type multiStore struct {
	Store
	tx     multiTx
	sealed atomic.Bool // see SealTx
}

// SealTx implements [idemkit.TxSealer]: while the Guard's function runs, Commit and Rollback refuse.
func (m *multiStore) SealTx(sealed bool) { m.sealed.Store(sealed) }

func (m *multiStore) Commit() error {
	if m.sealed.Load() {
		return errGuardOwned
	}
	if err := m.tx.commit(); err != nil {
		return fmt.Errorf("record: committing: %w", m.q.interpretError("committing a transaction on", err))
	}
	return nil
}

func (m *multiStore) Rollback() error {
	if m.sealed.Load() {
		return errGuardOwned
	}
	if err := m.tx.rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("record: rolling back: %w", err)
	}
	return nil
}

// InsertCommit implements [idemkit.InsertCommitter]: the record's INSERT and the COMMIT in one packet.
// It returns nil when both ran; idemkit.ErrExists when the record exists (the INSERT failed; the
// transaction is open and holds the row) or an error wrapping idemkit.ErrUnstorable (nothing sent, or
// the INSERT refused a value; the transaction is open); any other error when the transaction was
// rolled back by the server (a deadlock) or its outcome is not known (the connection broke), the
// connection then being closed.
func (m *multiStore) InsertCommit(ctx context.Context, rec *idemkit.Record) error {
	if err := checkRecord(m.q.dialect, rec); err != nil {
		return err
	}
	if len(rec.Response) > maxInlineResult {
		// Too large to double in hexadecimal: the INSERT as usual, then COMMIT.
		if err := m.Insert(ctx, rec); err != nil {
			return err
		}
		return m.Commit()
	}
	err := m.tx.end(ctx, m.q.insertCommit(rec))
	if err == nil {
		m.tx.release()
		return nil
	}
	var my *mysql.MySQLError
	switch {
	case errors.As(err, &my) && my.Number == mysqlOutOfRange:
		return idemkit.ErrExists
	case errors.As(err, &my) && isDataError(m.q.dialect, err):
		return m.q.interpretError("inserting into", err)
	}
	m.tx.rollbackQuiet()
	return fmt.Errorf("record: inserting and committing: %w", m.q.interpretError("inserting into", err))
}

// insertCommit returns the INSERT-and-COMMIT packet for rec (see the top of this file).
func (q *queries) insertCommit(rec *idemkit.Record) string { return q.insertOne(rec, insertCommitSfx) }

// insertOne returns the INSERT of rec with literals, followed by sfx, in one allocation.
func (q *queries) insertOne(rec *idemkit.Record, sfx string) string {
	var b strings.Builder
	b.Grow(len(q.insertCommitPfx) + len(sfx) + valuesLen(rec))
	b.WriteString(q.insertCommitPfx)
	writeValues(&b, rec)
	b.WriteString(sfx)
	return b.String()
}

// valuesLen bounds the length of rec's values as writeValues writes them.
func valuesLen(rec *idemkit.Record) int {
	const (
		perText = len("_utf8mb4 X''")
		perInt  = 20 // digits of an int64
		perSep  = len(", ")
	)
	return 14*perSep + 8*perText + 5*perInt +
		2*(len(rec.Scope)+len(rec.Key)+len(rec.Status)+len(rec.Owner)+len(rec.Fingerprint)+len(rec.GID)+
			len(rec.BranchID)+len(rec.Response)+len(rec.Error))
}

// writeValues writes rec's values as literals, in the order of the columns constant after scope and
// idem_key, without parentheses.
func writeValues(b *strings.Builder, rec *idemkit.Record) {
	hexLiteral(b, "", rec.Scope)
	b.WriteString(", ")
	hexLiteral(b, "", rec.Key)
	b.WriteString(", ")
	hexLiteral(b, textIntroducer, string(rec.Status))
	b.WriteString(", ")
	writeInt(b, rec.Fence)
	for _, s := range [...]string{rec.Owner, rec.Fingerprint, rec.GID, rec.BranchID} {
		b.WriteString(", ")
		hexLiteral(b, textIntroducer, s)
	}
	b.WriteString(", ")
	writeResponse(b, rec.Response)
	b.WriteString(", ")
	hexLiteral(b, textIntroducer, rec.Error)
	for _, t := range [...]time.Time{rec.LeaseUntil, rec.ExpiresAt, rec.CreatedAt, rec.UpdatedAt} {
		b.WriteString(", ")
		writeInt(b, millis(t))
	}
}

// writeResponse writes a result as a binary literal, or NULL when it is empty (as response stores it).
func writeResponse(b *strings.Builder, resp []byte) {
	if len(resp) == 0 {
		b.WriteString("NULL")
		return
	}
	hexLiteral(b, "", resp)
}

// insertCommitSfx ends the INSERT-and-COMMIT packet: a duplicate overflows the fence (error 1690)
// under the exclusive lock of ON DUPLICATE KEY UPDATE, and the COMMIT does not run.
const insertCommitSfx = ") ON DUPLICATE KEY UPDATE fence = fence + 1 + 18446744073709551615; COMMIT"

// textIntroducer marks a hexadecimal literal as utf8mb4 text: the server checks its encoding, as for
// a parameter. Binary columns (scope, idem_key, response) take the literal as it is.
const textIntroducer = "_utf8mb4 "

// hexLiteral writes s as a hexadecimal string literal, after introducer; ” when s is empty.
func hexLiteral[T string | []byte](b *strings.Builder, introducer string, s T) {
	if len(s) == 0 {
		b.WriteString("''")
		return
	}
	const digits = "0123456789ABCDEF"
	b.WriteString(introducer)
	b.WriteString("X'")
	for i := 0; i < len(s); i++ {
		b.WriteByte(digits[s[i]>>4])
		b.WriteByte(digits[s[i]&0xF])
	}
	b.WriteByte('\'')
}

// writeInt writes v in decimal.
func writeInt(b *strings.Builder, v int64) {
	var buf [20]byte
	b.Write(strconv.AppendInt(buf[:0], v, 10))
}

// heldConn runs statements on a connection the Store holds (a multiTx's).
type heldConn struct{ c *sql.Conn }

func (c heldConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	return affected(c.c.ExecContext(ctx, query, args...))
}

func (c heldConn) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return c.c.QueryContext(ctx, query, args...)
}
