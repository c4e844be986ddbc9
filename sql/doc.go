// Package sql holds the DDL of idemkit's tables for MySQL/MariaDB, PostgreSQL and SQLite, embedded in
// the binary. Import it as
//
//	idemsql "github.com/idemkit/idemkit/sql"
//
// (it is named sql, like database/sql, hence the alias).
//
// Files are named <table>_<dialect>.sql, with dialect mysql (also for MariaDB), postgres or sqlite:
//
//   - records_*.sql: the dedupe record table idemkit_records used by package record. Run it by hand or
//     through record.Store.CreateTable, which also renames the table for record.Options.Table.
//   - migrate_v1_to_v2_*.sql: the upgrade of a record table created by idemkit v1 (an AUTO_INCREMENT id
//     primary key) to the v2 layout (primary key (scope, idem_key), one secondary index). Run it by
//     hand or through record.Store.Migrate; see the README's "Upgrading from v1".
//   - barrier_*.sql: DTM's branch barrier table dtm_barrier.barrier used by package barrier.
//
// [Records], [Migration] and [File] return a file's text. Every statement of the table files is
// idempotent (CREATE ... IF NOT EXISTS) and ends with a semicolon; [Statements] splits a file into
// statements for drivers that run one at a time (MySQL without multiStatements, prepared-statement
// mode).
//
// Times in the record table (lease_until, expires_at, created_at, updated_at) are BIGINT Unix milliseconds
// (0 for "none"), not DATETIME/TIMESTAMP columns: no DSN flag such as parseTime or loc is needed, no time zone
// is involved, and the three dialects compare them the same way.
//
// The package has no mutable state; [FS] is read-only.
package sql
