// Package record is the [idemkit.Store] on gorm: dedupe records in a table of MySQL/MariaDB
// (gorm.io/driver/mysql), PostgreSQL (gorm.io/driver/postgres) or SQLite (github.com/glebarez/sqlite,
// pure Go, or gorm.io/driver/sqlite).
//
//	store, err := record.New(db, nil) // table idemkit_records
//	if err != nil { ... }
//	if err := store.CreateTable(ctx); err != nil { ... } // or run the DDL of package idemkit/sql
//	guard, err := idemkit.New(store, &idemkit.Options{Locker: locker})
//
// # Table
//
// The DDL lives in package github.com/idemkit/idemkit/sql (records_mysql.sql, records_postgres.sql,
// records_sqlite.sql); [Store.CreateTable] runs it for [Options.Table]. One row per (scope, idem_key),
// its primary key (clustered on InnoDB; a WITHOUT ROWID table on SQLite), and one secondary index,
// (status, expires_at), which serves the sweeper and the reconciler. A table created by idemkit v1
// (an AUTO_INCREMENT id) is upgraded by [Store.Migrate]; until then the Store works on it unchanged.
// Times are BIGINT Unix milliseconds, 0 for the zero time: no DSN flag (parseTime, loc) is needed and
// every dialect compares them the same way; they read back with millisecond precision in the local
// time zone. An empty or nil Response is stored as NULL and reads back as nil. On MySQL, scope and
// idem_key are VARBINARY(128), so keys differing only in case or trailing spaces stay distinct. A
// table that exists with other key columns (made by hand, or changed by a migration tool: a
// case-insensitive or PAD SPACE collation on MySQL, citext, CHAR or a nondeterministic collation on
// PostgreSQL) would make such keys share one record: [Store.CreateTable] refuses it
// ([Store.CheckKeyColumns]) with the ALTER TABLE that fixes it.
//
// # Statements
//
// SQL texts are built once by [New] and run on database/sql: on the *sql.DB under the gorm.DB, or on
// the *sql.Tx under a gorm transaction (also in gorm's PrepareStmt mode). gorm's callbacks, logger and
// plugins do not see them, nothing is reflected per call, and columns are scanned explicitly. Context
// deadlines and the caller's transaction apply as usual. On MySQL without interpolateParams the Store
// prepares its per-call statements once (per connection) and executes them with one round trip each.
// Per guarded call:
//
//   - Insert is one INSERT ... ON CONFLICT (scope, idem_key) DO NOTHING (PostgreSQL, SQLite) or
//     INSERT ... ON DUPLICATE KEY UPDATE scope = scope (MySQL), with no read before it: zero rows
//     affected means idemkit.ErrExists. A unique violation that still comes back as an error (MySQL
//     1062, PostgreSQL 23505, SQLite UNIQUE/PRIMARY KEY constraint) is translated to ErrExists as
//     well — except in a PostgreSQL transaction, which such an error aborts (a unique index being built
//     is no ON CONFLICT arbiter): there it wraps ErrConflict, and the transaction is to run again.
//   - Update and Delete are compare-and-swap on the record's version (WHERE scope, idem_key, fence, owner,
//     status): a primary-key lookup; no row means idemkit.ErrFenced. MySQL counts changed rather than
//     matched rows, so when it reports none one SELECT tells an update that changed nothing (success)
//     from a fenced one.
//   - Get is one SELECT by primary key, idemkit.ErrNotFound when there is no row; Peek the same without
//     a lock on a Store bound to a transaction.
//
// A new key in Tx mode ([Store.Tx]) therefore costs one INSERT in the business's transaction (and, when
// the Guard's cache cannot vouch for new keys, one read before it); in Execute mode two statements
// (claim, finish); a replay the Locker cannot serve two (the conflicting insert and a read); a cached
// replay none.
//
// A MySQL DSN with clientFoundRows=true is refused by New: under it a duplicate insert reports one row,
// like a new one. So is one whose connections use another character set than utf8mb4 or binary
// (charset=utf8, latin1, or a character_set_results, character_set_client, character_set_connection or
// collation_connection parameter in another one): the server converts the text it reads back to it,
// altering fingerprints, gids and stored errors.
//
// On PostgreSQL the Store checks, before its first statement on its pool (one SHOW, once; again
// after a check that failed), that the sessions exchange text in UTF-8: client_encoding UTF8, or
// SQL_ASCII on a UTF8 or SQL_ASCII database. The driver sends and reads text as UTF-8, and the
// server converts it from and to the session's client_encoding (set by the DSN, PGOPTIONS, the role
// or database's settings, and by default the database's own encoding): on LATIN1 a key "é" would be
// stored as "Ã©", another key than a UTF8 session's "é". Every statement is refused until it is
// fixed, with an error naming client_encoding. A Store bound to a transaction of another gorm.DB
// (WithTx) or to a *sql.Tx (WithSQLTx) checks once more, in it; a SET client_encoding run on one
// pooled connection after the check is not seen.
//
// # Multi-statement packets
//
// On MySQL and MariaDB with a DSN that sets multiStatements=true, the transactions [Store.BeginTx]
// begins for [idemkit.Guard.Tx] run on a connection the Store holds instead of a *sql.Tx, and the
// Store implements [idemkit.BeginGetter] and [idemkit.InsertCommitter] on them: the read before the
// function leaves in the packet of START TRANSACTION (a probe, SELECT 1; a record found is then read
// after a ROLLBACK, in one packet), the record's INSERT in the packet of the COMMIT;
// without that read, START TRANSACTION leaves with the transaction's first statement. A guarded
// transaction then costs no round trip beyond the business's statements and the COMMIT (and the read,
// without a Locker). A first statement that cannot carry START TRANSACTION (a prepare, arguments the
// driver does not interpolate) gets it on its own; when one that carried it fails before the server ran
// it (a prepare of the packet the server refuses, an argument refused before sending), the Store begins
// the transaction alone and runs the statement again.
// The INSERT of that packet fails on a duplicate under the row's exclusive lock, so the COMMIT never runs
// for a key another attempt finished; its values are hexadecimal literals. The connection returns to the
// pool only after a COMMIT or ROLLBACK the server answered, and is closed otherwise. The Store checks
// once that the server takes such packets and is not a Galera node (wsrep_on: there a brute-force
// aborted packet's INSERT was seen committed on its own); Options.NoMultiStatements turns this off, and
// [Store.SQLTx], bound Stores and gorm's PrepareStmt mode never use it.
//
// # Group commit
//
// On MySQL, MariaDB and PostgreSQL the statements a Store runs on its own, outside a transaction,
// are sent like the Locker's Redis commands under concurrency: one goes out at once while none of its
// kind is in flight, and those that come meanwhile leave together when it returns. On MySQL and
// MariaDB the claims of Execute and Mark modes leave as one multi-row INSERT (one commit for all; when it inserts fewer rows than it carries,
// each claim finds out whether the row is its own by its owner token); their finishes, on a
// multi-statement pool, as one packet of START TRANSACTION, the UPDATEs with their counts of changed
// rows, and COMMIT; the reads before Tx-mode functions without a Locker, on a multi-statement pool, as
// one SELECT by primary key outside any transaction (a lone read keeps the probe sent with START
// TRANSACTION). Every statement keeps its own conditions and outcome. A batch the server refuses (a
// deadlock, a value it rejects) committed nothing, and each statement then runs alone (an error that
// kills the connection, MySQL 1927 or PostgreSQL 57P01, may come after the commit: a finish that runs
// again then finds its own write in place, and succeeds); a batch whose
// outcome is unknown (the connection broke after sending it) gives each claim its row if it carries
// its token, and each finish the error, as a lost reply would. A lone caller never waits. A batch runs
// until the latest deadline among its callers, Options.BatchTimeout after it leaves standing in for a
// caller without one; such a caller's claim or finish that goes out alone runs at most that long too, as
// the others of its kind wait behind it.
// On PostgreSQL the claims leave as one multi-row INSERT … ON CONFLICT DO NOTHING with bound
// parameters, and the finishes as one UPDATE … FROM (VALUES …) RETURNING the keys it changed (a key
// finished twice in one batch goes in once, the other write alone after it); reads do not batch there.
// Options.NoBatch turns this off.
//
// # Transactions
//
// [Store.Tx] (gorm) and [Store.SQLTx] (database/sql) run a function in a transaction the Guard begins,
// writes the record in once and commits ([idemkit.Guard.Tx]); the Store implements
// [idemkit.TxBeginner] for it. [Store.WithTx] (a gorm transaction) and [Store.WithSQLTx] (a database/sql
// transaction) bind a Store to the caller's own transaction for [idemkit.Guard.DoTx] and MarkTx: the
// record commits or rolls back with the business writes, and the Store never commits or rolls back
// itself. Bound Stores read with a row lock (SELECT ... FOR UPDATE on MySQL and PostgreSQL), so a record
// committed by another transaction after the caller's REPEATABLE READ snapshot was taken is seen rather
// than missed; Peek reads without one. Two transactions writing the same key serialise on the primary
// key: the second waits for the first to commit or roll back, then replays or runs. On SQLite writers are
// serialised by the database: give it a busy timeout (_pragma=busy_timeout(5000)), below your requests'
// deadlines and the Guard's FinishTimeout — SQLite's busy handler does not see a context, so a
// statement waiting for a lock waits the whole busy timeout whatever its deadline. A deferred SQLite
// transaction that has read cannot write any more once another connection wrote (SQLITE_BUSY, or
// SQLITE_BUSY_SNAPSHOT once that one committed; the busy timeout does not help), so a DoTx (which
// reads first) in it fails under concurrency, as does a Guard.Tx whose function calls
// idemkit.FenceFromContext (which may read the record in the transaction): with
// idemkit.ErrStoreUnavailable, or, when the business's own write meets it first, with the driver's
// error, which the function gets and the Guard returns as the function's. Start such
// transactions with BEGIN IMMEDIATE (the driver's
// _txlock=immediate). Commit transactions of your own on the Store's pool (DoTx, MarkTx, any
// db.Transaction) in WAL mode (_pragma=journal_mode(WAL)): in the default rollback-journal mode a
// COMMIT waits for readers, BEGIN IMMEDIATE or not, and one that outlasts the busy timeout fails
// with SQLITE_BUSY and leaves the transaction open, and database/sql puts its connection back into
// the pool so. The Store's next statements on that connection run inside it and never commit: a
// claim answered and then lost (its function runs again once the connection goes), the failed
// transaction's own record replayed to a duplicate, the file locked for every other connection.
// Transactions the Guard begins ([Store.Tx], [Store.TxMark]) roll such a transaction back
// themselves. In WAL mode a COMMIT does not wait for readers. A SQLite ":memory:" database belongs to
// one connection: the table CreateTable made exists on the connection it used only, and statements
// on the pool's others fail with "no such table" (idemkit.ErrStoreUnavailable, a claim's finish
// among them, after its function ran). Share one in-memory database across the pool with
// file:NAME?mode=memory&cache=shared. PostgreSQL's SERIALIZABLE has a like limit: the read of the record in the
// transaction (DoTx's, and Guard.Tx's when its function calls idemkit.FenceFromContext) takes a
// predicate lock on a page of the primary key, so concurrent transactions on different new keys
// whose records share that page fail with a serialization failure (40001) — an
// idemkit.ErrStoreUnavailable to run again, never a duplicate or a second run — under load, often.
// Run guarded transactions at READ COMMITTED or REPEATABLE READ, which have no such false conflicts;
// Guard.Tx whose function does not ask for its fence reads nothing in the transaction.
//
// # Sweeper hooks
//
// [Store.DeleteExpired], [Store.RecoverStale] and [Store.Pending] serve a sweeper and a transaction
// reconciler, through the (status, expires_at) index. They work in bounded batches, one statement per
// batch that finds its rows by primary key, re-checking the conditions (on MySQL after a plain read of
// the batch's keys, elsewhere a LIMIT subquery on the primary key), so they never hold many locks and
// lock rows in the order the Guard's writes do. [Store.RecoverStaleClaims] recovers like RecoverStale,
// one statement per claim after a read of the batch, and returns the claims with their owners, so that
// a sweeper can release the locks their dead holders still hold (sweep.RecordTasksWithLocker).
//
// A Store is safe for concurrent use.
package record
