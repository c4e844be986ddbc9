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
// unique. Times are BIGINT Unix milliseconds, 0 for the zero time: no DSN flag (parseTime, loc) is needed
// and every dialect compares them the same way; they read back with millisecond precision in the local
// time zone. An empty or nil Response is stored as NULL and reads back as nil. On MySQL, scope and
// idem_key are VARBINARY(128), so keys differing only in case or trailing spaces stay distinct.
//
// # Statements
//
// SQL texts are built once by [New]; every statement goes through gorm (db.Exec, db.Raw(...).Rows()), so
// gorm's callbacks, logger and PrepareStmt mode see them, and columns are scanned explicitly, without
// reflection. Per guarded call:
//
//   - Insert is one INSERT ... ON CONFLICT (scope, idem_key) DO NOTHING (PostgreSQL, SQLite) or
//     INSERT ... ON DUPLICATE KEY UPDATE id = id (MySQL), with no read before it: zero rows affected
//     means idemkit.ErrExists. It never aborts a PostgreSQL transaction. A unique violation that still
//     comes back as an error (MySQL 1062, PostgreSQL 23505, SQLite UNIQUE/PRIMARY KEY constraint, or
//     gorm's ErrDuplicatedKey under TranslateError) is translated to ErrExists as well.
//   - Update and Delete are compare-and-swap on the record's version (WHERE scope, idem_key, fence, owner,
//     status): no row means idemkit.ErrFenced. MySQL counts changed rather than matched rows, so when it
//     reports none one SELECT tells an update that changed nothing (success) from a fenced one.
//   - Get is one SELECT, idemkit.ErrNotFound when there is no row.
//
// A new key in Execute mode therefore costs two statements (claim, finish), a replay the Locker cannot
// serve two (the conflicting insert and a read), a cached replay none.
//
// A MySQL DSN with clientFoundRows=true is refused by New: under it a duplicate insert reports one row,
// like a new one.
//
// # Transactions
//
// [Store.WithTx] (a gorm transaction) and [Store.WithSQLTx] (a database/sql transaction) bind a Store to
// the caller's transaction for [idemkit.Guard.DoTx]: the record commits or rolls back with the business
// writes, and the Store never commits or rolls back itself. Bound Stores read with a row lock (SELECT ...
// FOR UPDATE on MySQL and PostgreSQL), so a record committed by another transaction after the caller's
// REPEATABLE READ snapshot was taken is seen rather than missed. Two transactions claiming the same key
// serialise on the unique index: the second waits for the first to commit or roll back, then replays or
// runs. On SQLite writers are serialised by the database: give it a busy timeout
// (_pragma=busy_timeout(5000)). A deferred SQLite transaction that has read before another connection
// committed cannot write any more (SQLITE_BUSY_SNAPSHOT, "database is locked (517)"), so a claim in it
// fails with idemkit.ErrStoreUnavailable; start such transactions with BEGIN IMMEDIATE (the driver's
// _txlock=immediate) or claim before reading.
//
// # Sweeper hooks
//
// [Store.DeleteExpired], [Store.RecoverStale] and [Store.Pending] serve a sweeper and a transaction
// reconciler. They work in bounded batches (select ids with LIMIT, then act on WHERE id IN (...)
// re-checking the conditions), so they need no dialect-specific syntax and never hold many locks.
//
// A Store is safe for concurrent use.
package record
