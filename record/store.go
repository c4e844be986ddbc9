package record

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/batch"
	"github.com/idemkit/idemkit/internal/pgddl"
)

// DefaultTable is the record table's name when Options.Table is empty; the DDL files of package
// github.com/idemkit/idemkit/sql create it.
const DefaultTable = "idemkit_records"

// Limits of the bounded columns, in bytes. Insert and Update check them, so no database ever
// truncates a value (MySQL does when strict mode is off).
const (
	maxOwner       = 64
	maxText        = 128 // fingerprint, gid, branch_id
	maxStatus      = 16
	maxMySQLResult = 1<<24 - 1 // MEDIUMBLOB
)

// Options configure a [Store]. The zero value works.
type Options struct {
	// Table is the record table: a name of letters, digits and underscores not starting with a digit,
	// optionally qualified by one schema ("schema.table"), each part at most 64 bytes (63 on
	// PostgreSQL, which cuts longer names: the Store would use another table). Anything else
	// makes New fail. The name is quoted in every statement, so on PostgreSQL it is case-sensitive:
	// use lowercase to match a table created by an unquoted CREATE TABLE. Defaults to DefaultTable.
	Table string

	// NoMultiStatements keeps every statement in a packet of its own. By default, on MySQL and
	// MariaDB with a DSN that sets multiStatements=true, a transaction the Store begins for
	// [idemkit.Guard.Tx] runs on a connection the Store holds and sends the record's INSERT and the
	// COMMIT in one packet: one round trip fewer per guarded transaction (see [Store.BeginTx]). The
	// Store finds out once whether the connection allows it, and never does it on a Galera node.
	NoMultiStatements bool

	// NoBatch sends every claim, finish and read on its own. By default, on MySQL, MariaDB and
	// PostgreSQL, the statements the Store runs outside a transaction are group-committed under
	// concurrency: the claims of Execute and Mark modes that come while one is in flight leave
	// together as one multi-row INSERT, their finishes as one transaction (MySQL, with
	// multiStatements, as for NoMultiStatements) or one UPDATE (PostgreSQL), and the reads before
	// Tx-mode functions without a Locker as one SELECT (MySQL, with multiStatements). Each keeps its
	// own outcome; see the package documentation.
	NoBatch bool

	// BatchTimeout bounds the statements group commit sends (see NoBatch) for a caller whose context
	// has no deadline: a batch runs until the latest deadline among its callers, this long standing
	// in for a missing one, and a claim or finish of such a caller that goes out alone runs at most
	// this long. Every claim, finish and read queued behind it waits for it, so without a bound a
	// connection that went silent (a server or network that stops answering) would hold them all until
	// TCP gives up on it, minutes later. A caller whose context has a deadline is bounded by it, as with
	// a statement of its own. Defaults to DefaultBatchTimeout (1m: longer than InnoDB's default lock
	// wait, 50 s, so only a statement whose connection went silent reaches it). Negative values make
	// New fail.
	BatchTimeout time.Duration
}

// DefaultBatchTimeout is the default [Options.BatchTimeout].
const DefaultBatchTimeout = time.Minute

// Store is an [idemkit.Store] on a gorm database: MySQL/MariaDB (gorm.io/driver/mysql), PostgreSQL
// (gorm.io/driver/postgres) or SQLite (github.com/glebarez/sqlite or gorm.io/driver/sqlite). Users
// hand it a *gorm.DB (and gorm transactions, see [Store.WithTx] and [Store.Tx]); its own few statements
// run on the database/sql pool or transaction underneath, without gorm's callbacks, logger or
// reflection (see the package documentation).
//
// Writes are insert-first and compare-and-swap: Insert reads only when a batch of claims inserted
// fewer rows than it carried (see "Group commit" in the package documentation), Update and Delete are
// conditioned on the record's version (fence, owner and status). A Store is safe for concurrent use;
// one bound to a transaction is as safe as the transaction.
type Store struct {
	q    *queries
	c    conn
	inTx bool
	gdb  *gorm.DB     // the database (base Store) or the transaction (bound Store); nil on WithSQLTx
	sdb  *sql.DB      // the pool under gdb; nil when gorm's pool is not a *sql.DB
	ps   *stmtCache   // prepared statements (MySQL without interpolateParams), shared by bound Stores
	cfg  *gorm.Config // gdb's configuration: a gorm transaction with the same one shares sdb
	// multi is what the pool allows (multiUnknown, multiOn, multiOff), shared by bound Stores; nil
	// when multi-statement transactions are off (not MySQL, or Options.NoMultiStatements).
	multi *atomic.Int32
	// claims and finishes group-commit the base Store's claims and finishes (MySQL; see batch.go);
	// nil when off. Bound Stores never use them.
	claims   *batch.Batcher[*claimOp]
	finishes *batch.Batcher[*finishOp]
	probes   *batch.Batcher[*probeOp] // the reads before Tx-mode functions (BeginTxGet)
	// batchTimeout is Options.BatchTimeout: the bound of a batch for a caller without a deadline.
	batchTimeout time.Duration
	// enc is the client_encoding check of the base Store's pool (PostgreSQL; see pgddl.EncodingCheck),
	// shared by the Stores bound to its transactions; nil on other databases.
	enc *pgddl.EncodingCheck
}

// New returns a Store on db, whose dialect (db.Dialector.Name()) must be mysql, postgres or sqlite,
// with the table of opts (nil for defaults). It builds every SQL text once and touches no database;
// create the table with [Store.CreateTable] or the DDL of package github.com/idemkit/idemkit/sql, or
// upgrade a v1 table with [Store.Migrate]. Pass the database, not a transaction: bind transactions with
// [Store.WithTx].
//
// On MySQL, when the DSN does not set interpolateParams=true, the Store prepares its per-call
// statements once (per connection of the pool) and executes them with one round trip each; with
// interpolateParams it sends them as text, also one round trip.
//
// It returns an error when db is nil, not initialized (what a failed gorm.Open returns with its error)
// or in DryRun mode, its dialect is not supported, Options.Table is invalid or Options.BatchTimeout
// negative, or a MySQL DSN sets clientFoundRows=true (a duplicate insert would then look like a new
// one) or a connection character set other than utf8mb4 or binary (charset=utf8, the 3-byte utf8mb3,
// or latin1, or such a collation: the server converts the utf8mb4 text it reads back to it, and a
// fingerprint that comes back altered no longer matches its own duplicates). On PostgreSQL the
// sessions' client_encoding is checked before the first statement, and a Store on sessions that do not
// exchange text in UTF-8 refuses every statement (see the package documentation).
func New(db *gorm.DB, opts *Options) (*Store, error) {
	if db == nil || db.Config == nil || db.Dialector == nil {
		return nil, errors.New("record: nil gorm.DB")
	}
	if db.Statement == nil || db.ConnPool == nil {
		// What gorm.Open returns with its error when it could not open the database.
		return nil, errors.New("record: the gorm.DB is not initialized: gorm.Open failed (check the error it returned)")
	}
	if db.DryRun {
		return nil, errors.New("record: gorm.DB in DryRun mode runs no statements")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Table = cmp.Or(o.Table, DefaultTable)
	schema, table, err := validateTable(db.Dialector.Name(), o.Table)
	if err != nil {
		return nil, err
	}
	if o.BatchTimeout < 0 {
		return nil, fmt.Errorf("record: negative BatchTimeout %s", o.BatchTimeout)
	}
	o.BatchTimeout = cmp.Or(o.BatchTimeout, DefaultBatchTimeout)
	prepare, multi := false, false
	switch name := db.Dialector.Name(); name {
	case dialectMySQL:
		cfg := mysqlConfig(db.Dialector)
		if why := mysqlRefusal(cfg); why != "" {
			return nil, errors.New("record: " + why)
		}
		prepare = cfg == nil || !cfg.InterpolateParams
		// Multi-statement packets when the DSN allows them, or may (a dialector on an existing
		// connection): the first transaction then asks the server.
		multi = !o.NoMultiStatements && (cfg == nil || cfg.MultiStatements)
	case dialectPostgres, dialectSQLite:
	default:
		return nil, fmt.Errorf("record: unsupported gorm dialect %q (want mysql, postgres or sqlite)", name)
	}
	q := buildQueries(db.Dialector.Name(), schema, table)
	s := &Store{q: q, gdb: db, cfg: db.Config, batchTimeout: o.BatchTimeout}
	if multi {
		s.multi = new(atomic.Int32)
	}
	if sdb, err := db.DB(); err == nil {
		s.sdb = sdb
		if prepare {
			s.ps = newStmtCache(sdb, q.insert, q.get, q.getLocked, q.update, q.finish, q.confirm, q.confirmLock, q.delete)
		}
		s.c = dbConn{db: sdb, ps: s.ps}
	} else {
		s.c = poolConn{p: db.Statement.ConnPool}
	}
	if q.dialect == dialectPostgres {
		s.enc = new(pgddl.EncodingCheck)
		s.c = encodingConn{s.c, s.enc}
	}
	if q.dialect != dialectSQLite && !o.NoBatch && s.sdb != nil {
		s.newBatchers()
	}
	return s, nil
}

// errClientFoundRows says why a MySQL connection with clientFoundRows is refused.
const errClientFoundRows = "the MySQL DSN sets clientFoundRows=true, which makes a duplicate insert look like a new one; open the gorm.DB without it"

// mysqlConfig returns the driver configuration of a MySQL dialector, from its DSNConfig or its DSN,
// or nil when it has neither (a dialector on an existing connection).
func mysqlConfig(d gorm.Dialector) *mysql.Config {
	var cfg *gormmysql.Config
	switch v := d.(type) {
	case *gormmysql.Dialector:
		cfg = v.Config
	case gormmysql.Dialector:
		cfg = v.Config
	}
	if cfg == nil {
		return nil
	}
	if cfg.DSNConfig != nil {
		return cfg.DSNConfig
	}
	if c, err := mysql.ParseDSN(cfg.DSN); err == nil && cfg.DSN != "" {
		return c
	}
	return nil
}

// errForeignCharset says why a MySQL connection in character set cs (see foreignCharset) is refused.
func errForeignCharset(cs string) string {
	return "the MySQL DSN makes the connections' character set " + cs + ": the record table is utf8mb4, and the " +
		"server converts the text it reads back to the connection's character set, so a fingerprint, gid or stored " +
		"error holding a character " + cs + " lacks would come back altered (a duplicate would get ErrPayloadMismatch " +
		"instead of its answer); set charset=utf8mb4, or leave charset and collation out (the driver's default), and " +
		"no character_set_client, _connection, _results or collation_connection parameter in another character set"
}

// foreignCharset returns the character set a MySQL DSN has its connections read text in (the first
// of its charset parameter's choices, else its collation's) when that is another than utf8mb4 or
// binary (which reads the bytes stored), or "" (also for a DSN that sets neither: the driver's
// default is utf8mb4). The character set variables the DSN sets itself (the driver sets any
// parameter it does not know as a system variable: character_set_results=latin1) count too.
func foreignCharset(cfg *mysql.Config) string {
	if cfg == nil {
		return ""
	}
	var cs string
	if v, ok := cfg.Params["charset"]; ok {
		cs, _, _ = strings.Cut(v, ",")
	} else {
		cs, _, _ = strings.Cut(cfg.Collation, "_")
	}
	if cs = foreign(cs); cs != "" {
		return cs
	}
	for _, v := range []string{"character_set_client", "character_set_connection", "character_set_results", "collation_connection"} {
		if val, ok := cfg.Params[v]; ok {
			val = strings.Trim(strings.TrimSpace(val), "'\"`")
			if v == "collation_connection" {
				val, _, _ = strings.Cut(val, "_")
			}
			if cs := foreign(val); cs != "" && cs != "null" {
				return cs // NULL results: the bytes stored, unconverted
			}
		}
	}
	return ""
}

// foreign returns cs lower-cased, or "" when it is empty, utf8mb4 or binary.
func foreign(cs string) string {
	cs = strings.ToLower(strings.TrimSpace(cs))
	if cs == "" || cs == "utf8mb4" || cs == "binary" {
		return ""
	}
	return cs
}

// mysqlRefusal says why the Store refuses connections of the MySQL DSN cfg, or returns "": under
// clientFoundRows a duplicate left unchanged by ON DUPLICATE KEY UPDATE reports one row, like an
// insert (and the plain INSERT alternative deadlocks under concurrent duplicates); in another
// character set than utf8mb4 text reads back altered (see foreignCharset).
func mysqlRefusal(cfg *mysql.Config) string {
	if cfg != nil && cfg.ClientFoundRows {
		return errClientFoundRows
	}
	if cs := foreignCharset(cfg); cs != "" {
		return errForeignCharset(cs)
	}
	return ""
}

// Table returns the configured table name.
func (s *Store) Table() string { return s.q.name }

// Dialect returns the database dialect: "mysql", "postgres" or "sqlite".
func (s *Store) Dialect() string { return s.q.dialect }

// WithTx returns a Store that runs every statement in tx, a transaction of a gorm.DB of the same
// dialect (the tx argument of db.Transaction, or db.Begin()), on the database/sql transaction under it.
// Pass it to [idemkit.Guard.DoTx] or MarkTx: the record then commits or rolls back with the business
// writes. Get locks the row it reads (SELECT ... FOR UPDATE on MySQL and PostgreSQL) so that a record
// committed by another transaction after tx began is seen. The returned Store never commits or rolls
// back tx; its statements fail when tx is nil, of another dialect, or on a MySQL DSN that sets
// clientFoundRows or a character set other than utf8mb4 (see [New]), or on PostgreSQL when tx, of
// another gorm.DB than the Store's, is in a session whose client_encoding is not UTF8 (checked once, in
// tx, before the returned Store's first statement).
func (s *Store) WithTx(tx *gorm.DB) *Store {
	b := &Store{q: s.q, inTx: true, gdb: tx, sdb: s.sdb, ps: s.ps, cfg: s.cfg, multi: s.multi, enc: s.enc}
	switch {
	case tx == nil || tx.Config == nil || tx.Dialector == nil || tx.Statement == nil:
		b.c = errConn{errors.New("record: WithTx: nil transaction")}
	case tx.Dialector.Name() != s.q.dialect:
		b.c = errConn{fmt.Errorf("record: WithTx: transaction of dialect %q on a %s Store", tx.Dialector.Name(), s.q.dialect)}
	default:
		b.c = s.connOf(tx)
		if s.enc != nil {
			// A transaction of the Store's own gorm.DB is on the pool the Store checked (or checks
			// now, in the transaction): the Guard-owned Tx modes pass here on every call. Another
			// gorm.DB's pool may open its sessions in another encoding: checked once for b.
			check := s.enc
			if s.cfg == nil || tx.Config.ConnPool != s.cfg.ConnPool {
				check = new(pgddl.EncodingCheck)
			}
			b.c = encodingConn{b.c, check}
		}
		// A transaction of the Store's own gorm.DB shares its DSN's parsed config, checked by New:
		// the Guard-owned Tx modes pass here on every call.
		if tx.Dialector.Name() == dialectMySQL {
			if cfg := mysqlConfig(tx.Dialector); cfg != nil && (s.gdb == nil || s.gdb.Dialector == nil || cfg != mysqlConfig(s.gdb.Dialector)) {
				if why := mysqlRefusal(cfg); why != "" {
					b.c = errConn{errors.New("record: WithTx: " + why)}
				}
			}
		}
	}
	return b
}

// connOf returns the conn running statements in the session tx: its *sql.Tx (with the prepared
// statements when tx comes from this Store's gorm.DB), or its connection pool as it is.
func (s *Store) connOf(tx *gorm.DB) conn {
	pool := tx.Statement.ConnPool
	if stx := sqlTxOf(pool); stx != nil {
		var ps *stmtCache
		if s.cfg != nil && tx.Config.ConnPool == s.cfg.ConnPool {
			// A session of the same gorm.DB (gorm copies its Config for every session and
			// transaction, the pool with it), so the *sql.DB the statements were prepared on.
			ps = s.ps
		}
		return txConn{tx: stx, ps: ps}
	}
	if pool == nil {
		return errConn{errors.New("record: WithTx: the gorm.DB has no connection pool")}
	}
	if sdb, ok := pool.(*sql.DB); ok {
		return dbConn{db: sdb, ps: s.ps}
	}
	return poolConn{p: pool}
}

// WithSQLTx returns a Store that runs every statement in tx, a database/sql transaction on the same
// kind of database as s. On MySQL its connection must not set clientFoundRows nor a character set
// other than utf8mb4 (see [New]); nothing can check that here. On PostgreSQL the returned Store checks
// tx's client_encoding once, in tx, before its first statement (one SHOW; see [New]). Like
// [Store.WithTx] it reads with row locks and never commits or rolls back tx; its statements fail when
// tx is nil.
func (s *Store) WithSQLTx(tx *sql.Tx) *Store {
	b := &Store{q: s.q, c: txConn{tx: tx}, inTx: true, sdb: s.sdb, ps: s.ps, cfg: s.cfg, multi: s.multi, enc: s.enc}
	switch {
	case tx == nil:
		b.c = errConn{errors.New("record: WithSQLTx: nil transaction")}
	case s.enc != nil:
		// Nothing tells which pool tx is of: checked once for b, in tx.
		b.c = encodingConn{b.c, new(pgddl.EncodingCheck)}
	}
	return b
}

// Insert implements [idemkit.Store]: one INSERT that does nothing on a duplicate (scope, key)
// (ON CONFLICT DO NOTHING, or ON DUPLICATE KEY UPDATE id = id on MySQL), so it never aborts a
// PostgreSQL transaction. It returns idemkit.ErrExists when the record exists, an error wrapping
// idemkit.ErrInvalidKey when Scope or Key is empty or longer than idemkit.MaxStoredLen bytes, an error
// when another field is too long for its column, an error matching idemkit.ErrInFlight when it gave up
// waiting for the key's row, locked by another attempt's transaction, after the session's lock wait
// timeout (PostgreSQL lock_timeout, InnoDB innodb_lock_wait_timeout; Get and Update on a Store bound
// to a transaction say so too), or the database's error.
func (s *Store) Insert(ctx context.Context, rec *idemkit.Record) error {
	if err := checkRecord(s.q.dialect, rec); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil && !s.inTx {
		return s.notSent(err)
	}
	if s.claims != nil && rec.Owner != "" && batchable(rec) {
		op := &claimOp{own: *rec}
		op.rec = &op.own
		if err := s.claims.Do(ctx, op); err != nil {
			if errors.Is(err, batch.ErrWithdrawn) { // its caller left while it waited for a batch
				return s.notSent(ctx.Err())
			}
			return s.q.interpretError("inserting into", err)
		}
		return op.err
	}
	return s.insertAlone(ctx, rec)
}

// notSent is the error of a claim never sent to the database: err, its caller's context's error,
// came first.
func (s *Store) notSent(err error) error {
	return fmt.Errorf("record: inserting into %s: %w: %w", s.q.name, idemkit.ErrNotSent, err)
}

// insertAlone is Insert in a statement of its own.
func (s *Store) insertAlone(ctx context.Context, rec *idemkit.Record) error {
	var n int64
	var err error
	if s.literals(rec) {
		n, err = s.exec(ctx, s.q.insertOne(rec, insertRowsSfx))
	} else {
		n, err = s.exec(ctx, s.q.insert, rec.Scope, rec.Key, string(rec.Status), rec.Fence, rec.Owner, rec.Fingerprint,
			rec.GID, rec.BranchID, response(rec.Response), rec.Error,
			millis(rec.LeaseUntil), millis(rec.ExpiresAt), millis(rec.CreatedAt), millis(rec.UpdatedAt))
	}
	if err != nil {
		if s.inTx && s.q.dialect == dialectPostgres && isUniqueViolation(s.q.dialect, err) {
			// ON CONFLICT does nothing only for its arbiter: a unique index not valid yet (CREATE
			// INDEX CONCURRENTLY building it, as the v1→v2 migration does) refused the duplicate,
			// and the error aborted the transaction. Run it again: the other writer's record answers.
			return fmt.Errorf("record: inserting into %s: %w: a unique index being built refused a duplicate: %w", s.q.name, ErrConflict, err)
		}
		if held := s.q.heldElsewhere("inserting into", err); held != nil {
			return held
		}
		return s.q.interpretError("inserting into", err)
	}
	if n == 0 {
		return idemkit.ErrExists
	}
	return nil
}

// Get implements [idemkit.Store]. It returns idemkit.ErrNotFound when there is no record. On a Store
// bound to a transaction it locks the row (FOR UPDATE on MySQL and PostgreSQL) until the transaction
// ends. Times come back with millisecond precision in the local time zone; an empty Response as nil.
func (s *Store) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	query := s.q.get
	if s.inTx {
		query = s.q.getLocked
	}
	rec := &idemkit.Record{Scope: scope, Key: key}
	if err := s.scanRecord(ctx, query, []any{scope, key}, rec); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, idemkit.ErrNotFound
		}
		if held := s.q.heldElsewhere("reading", err); held != nil && s.inTx {
			return nil, held
		}
		return nil, s.q.interpretError("reading", err)
	}
	return rec, nil
}

// Peek implements [idemkit.Peeker]: Get without a lock, a plain read in the transaction's snapshot
// on a Store bound to one (the same as Get on one that is not).
func (s *Store) Peek(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	rec := &idemkit.Record{Scope: scope, Key: key}
	if err := s.scanRecord(ctx, s.q.get, []any{scope, key}, rec); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, idemkit.ErrNotFound
		}
		return nil, s.q.interpretError("reading", err)
	}
	return rec, nil
}

// Update implements [idemkit.Store]: it writes rec to the record with rec's Scope and Key if its
// fence, owner and status equal prev, and returns idemkit.ErrFenced otherwise: every column for a
// takeover, and for a claim's own write (rec keeps prev's fence and owner: a finish, a renewal, a
// settlement) only status, response, error, lease_until, expires_at and updated_at, by primary key.
// MySQL counts changed rather than matched rows; when it reports none, one SELECT tells a write that
// changed nothing (success) from a fenced one. Other errors are those of Insert.
func (s *Store) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	if err := checkRecord(s.q.dialect, rec); err != nil {
		return err
	}
	var n int64
	var err error
	switch {
	case rec.Fence == prev.Fence && rec.Owner == prev.Owner && s.batchesFinishes() && batchable(rec):
		op := &finishOp{own: *rec, prev: prev}
		op.rec = &op.own
		if err = s.finishes.Do(ctx, op); err == nil {
			n, err = op.n, op.err
		}
	case rec.Fence == prev.Fence && rec.Owner == prev.Owner:
		n, err = s.finishAlone(ctx, rec, prev)
	default:
		n, err = s.exec(ctx, s.q.update, string(rec.Status), rec.Fence, rec.Owner, rec.Fingerprint, rec.GID,
			rec.BranchID, response(rec.Response), rec.Error,
			millis(rec.LeaseUntil), millis(rec.ExpiresAt), millis(rec.CreatedAt), millis(rec.UpdatedAt),
			rec.Scope, rec.Key, prev.Fence, prev.Owner, string(prev.Status))
	}
	if err != nil {
		if held := s.q.heldElsewhere("updating", err); held != nil && s.inTx {
			return held
		}
		return s.q.interpretError("updating", err)
	}
	if n > 0 {
		return nil
	}
	if s.q.dialect == dialectMySQL {
		return s.confirm(ctx, rec.Scope, rec.Key, prev)
	}
	return idemkit.ErrFenced
}

// batchesFinishes reports whether s sends finishes in batches: on PostgreSQL, and on MySQL unless the
// pool turned out not to take multi-statement packets (Galera, a proxy refusing them), where a batch
// could only run its finishes alone, one after the other, while every other finish waited behind it.
func (s *Store) batchesFinishes() bool {
	return s.finishes != nil && (s.q.dialect == dialectPostgres || s.multi.Load() != multiOff)
}

// finishAlone runs a claim's own write (finish, renewal, settlement) in a statement of its own and
// returns the rows changed: only these columns can have changed.
func (s *Store) finishAlone(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) (int64, error) {
	if s.literals(rec) {
		return s.exec(ctx, s.q.finishOne(rec, prev))
	}
	return s.exec(ctx, s.q.finish, string(rec.Status), response(rec.Response), rec.Error,
		millis(rec.LeaseUntil), millis(rec.ExpiresAt), millis(rec.UpdatedAt),
		rec.Scope, rec.Key, prev.Fence, prev.Owner, string(prev.Status))
}

// literals reports whether a lone insert or finish of rec is sent as one statement with its values
// written as literals (MySQL; a result small enough), rather than with arguments: no argument is boxed,
// converted or interpolated (about a dozen allocations fewer per statement), and a pool without
// interpolateParams needs no prepared statement for it. The literals are hexadecimal, so no value is
// ever parsed as SQL; text columns get the utf8mb4 introducer, so the server checks their encoding
// as it checks a parameter's. Only on database/sql's own pool or transaction: a gorm.ConnPool of
// another kind (a plugin's) may prepare and keep a statement per text.
func (s *Store) literals(rec *idemkit.Record) bool {
	if _, other := s.c.(poolConn); other || s.q.dialect != dialectMySQL {
		return false
	}
	return batchable(rec)
}

// confirm runs after a MySQL UPDATE changed no row: if the row with prev's version exists, the update
// matched it and had nothing to change. (A record never returns to an earlier version: a takeover or
// recovery bumps the fence, and a claim's status only leaves PROCESSING.)
func (s *Store) confirm(ctx context.Context, scope, key string, prev idemkit.Version) error {
	query := s.q.confirm
	if s.inTx {
		query = s.q.confirmLock
	}
	var one int
	switch err := queryOne(ctx, s.c, query, []any{scope, key, prev.Fence, prev.Owner, string(prev.Status)}, &one); {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return idemkit.ErrFenced
	default:
		return s.q.interpretError("confirming update of", err)
	}
}

// Delete implements [idemkit.Store]: it removes the record for scope and key if its fence, owner and
// status equal prev, and returns idemkit.ErrFenced otherwise, or the database's error.
func (s *Store) Delete(ctx context.Context, scope, key string, prev idemkit.Version) error {
	n, err := s.exec(ctx, s.q.delete, scope, key, prev.Fence, prev.Owner, string(prev.Status))
	if err != nil {
		return s.q.interpretError("deleting from", err)
	}
	if n == 0 {
		return idemkit.ErrFenced
	}
	return nil
}

// deadlockRetries is how many times a statement outside a caller's transaction is retried after the
// database rolled it back as a deadlock victim or on a serialization failure.
const deadlockRetries = 3

// exec runs one write. Outside a caller's transaction each statement is its own transaction, so when
// the database rolls it back on a write conflict nothing of it happened and it is run again: picked
// as a deadlock victim (InnoDB does so between concurrent single-row writes on one unique key), or,
// on PostgreSQL when the session's transactions default to REPEATABLE READ or SERIALIZABLE
// (default_transaction_isolation set by the DSN, the role or the database), failed with a
// serialization failure because the row it waited for — another attempt's claim, takeover or finish
// of the key — was committed after the statement's snapshot. Run again, the statement takes a new
// snapshot and meets that row as it would have under READ COMMITTED. Inside a caller's transaction the
// conflict rolled the whole transaction back: the error is returned for the caller to retry.
func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	for attempt := 0; ; attempt++ {
		n, err := s.c.exec(ctx, query, args...)
		if err == nil || s.inTx || attempt == deadlockRetries || !rolledBackAlone(s.q.dialect, err) || ctx.Err() != nil {
			return n, err
		}
	}
}

// checkRecord rejects what a column would not hold as given.
func checkRecord(dialect string, rec *idemkit.Record) error {
	switch {
	case rec == nil:
		return errors.New("record: nil Record")
	case rec.Scope == "" || rec.Key == "":
		return fmt.Errorf("record: %w: empty scope or key", idemkit.ErrInvalidKey)
	case len(rec.Scope) > idemkit.MaxStoredLen || len(rec.Key) > idemkit.MaxStoredLen:
		return fmt.Errorf("record: %w: scope or key longer than %d bytes", idemkit.ErrInvalidKey, idemkit.MaxStoredLen)
	case len(rec.Status) > maxStatus:
		return fmt.Errorf("record: %w: status longer than %d bytes", idemkit.ErrUnstorable, maxStatus)
	case len(rec.Owner) > maxOwner:
		return fmt.Errorf("record: %w: owner longer than %d bytes", idemkit.ErrUnstorable, maxOwner)
	case len(rec.Fingerprint) > maxText || len(rec.GID) > maxText || len(rec.BranchID) > maxText:
		return fmt.Errorf("record: %w: fingerprint, gid or branch id longer than %d bytes", idemkit.ErrUnstorable, maxText)
	case dialect == dialectMySQL && len(rec.Response) > maxMySQLResult:
		return fmt.Errorf("record: %w: response of %d bytes does not fit a MySQL MEDIUMBLOB (%d)", idemkit.ErrUnstorable, len(rec.Response), maxMySQLResult)
	}
	return nil
}

// scanRecord reads the one row of query (the columns constant) into rec, or returns sql.ErrNoRows.
func (s *Store) scanRecord(ctx context.Context, query string, args []any, rec *idemkit.Record) error {
	var c recordColumns
	if err := queryOne(ctx, s.c, query, args, c.dest(rec)...); err != nil {
		return err
	}
	c.fill(rec)
	return nil
}

// recordColumns holds the columns that need converting on their way into a Record.
type recordColumns struct {
	status                       string
	lease, expires, created, upd int64
}

// dest returns scan destinations for the columns constant.
func (c *recordColumns) dest(rec *idemkit.Record) []any {
	return []any{&c.status, &rec.Fence, &rec.Owner, &rec.Fingerprint, &rec.GID, &rec.BranchID, &rec.Response,
		&rec.Error, &c.lease, &c.expires, &c.created, &c.upd}
}

func (c *recordColumns) fill(rec *idemkit.Record) {
	rec.Status = idemkit.Status(c.status)
	if len(rec.Response) == 0 {
		rec.Response = nil
	}
	rec.LeaseUntil, rec.ExpiresAt = fromMillis(c.lease), fromMillis(c.expires)
	rec.CreatedAt, rec.UpdatedAt = fromMillis(c.created), fromMillis(c.upd)
}

// response is what the response column gets: NULL for an empty result.
func response(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// millis is t as Unix milliseconds, 0 for the zero time.
func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromMillis is the inverse of millis.
func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
