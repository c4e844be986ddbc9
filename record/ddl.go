package record

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit/internal/pgddl"
	idemsql "github.com/idemkit/idemkit/sql"
)

// CreateTable creates the record table and its indexes if they do not exist, from the DDL file of
// package github.com/idemkit/idemkit/sql for the Store's dialect, renamed for Options.Table (index
// names are derived from the table name). It is idempotent, also when several processes run it at
// once (replicas starting together). DDL commits implicitly on MySQL: call it on a Store that is not
// bound to a transaction. It returns the first failing statement's error.
//
// It leaves the secondary index of an existing v1 table to [Store.Migrate] (on PostgreSQL built
// CONCURRENTLY), and on PostgreSQL runs no CREATE INDEX for a table that has its index: CREATE INDEX,
// even IF NOT EXISTS, waits for a lock on the table behind every open transaction that wrote to it,
// with every later write queued behind that wait — a CreateTable at a process's start would stall the
// table's traffic, or block its writes for a whole build on a large v1 table.
//
// It returns [Store.CheckKeyColumns]'s error, and creates nothing, when the table exists with scope
// or idem_key columns that do not tell every two keys apart (made by hand, or changed by a migration
// tool: a case-insensitive collation, citext): CREATE TABLE IF NOT EXISTS would keep such a table.
func (s *Store) CreateTable(ctx context.Context) error {
	ddl, err := s.DDL()
	if err != nil {
		return err
	}
	if err := s.CheckKeyColumns(ctx); err != nil {
		return err
	}
	for _, stmt := range idemsql.Statements(ddl) {
		if strings.HasPrefix(stmt, "CREATE INDEX") {
			// Asked after CREATE TABLE: of the table the Store's statements name.
			skip, err := s.indexInPlace(ctx)
			if err != nil {
				return err
			}
			if skip {
				continue
			}
		}
		if err := s.execDDL(ctx, stmt); err != nil {
			return err
		}
	}
	if !s.inTx {
		s.ps.prepareAll(ctx) // now that the table exists (see stmtCache)
	}
	return nil
}

// indexInPlace reports whether CreateTable must not run the DDL's CREATE INDEX: the table exists and
// is a v1 table (an id column; its v2 index is Migrate's to build), or, on PostgreSQL, has the index
// already. (MySQL's index is part of its CREATE TABLE; SQLite's CREATE INDEX IF NOT EXISTS of an
// index that exists takes no lock.)
func (s *Store) indexInPlace(ctx context.Context) (bool, error) {
	if s.q.dialect == dialectMySQL {
		return false, nil
	}
	columns, id, err := s.tableColumns(ctx)
	if err != nil || columns == 0 {
		return false, err
	}
	if id > 0 || s.q.dialect != dialectPostgres {
		return id > 0, nil
	}
	return s.hasPostgresIndex(ctx, "_status_expires_idx")
}

// hasPostgresIndex reports whether the Store's PostgreSQL table has one of the indexes named for it
// with these suffixes (see indexName).
func (s *Store) hasPostgresIndex(ctx context.Context, suffixes ...string) (bool, error) {
	query := "SELECT count(*) FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid " +
		"WHERE x.indrelid = to_regclass($1::text) AND c.relname = ANY($2)"
	names := make([]string, len(suffixes))
	for i, suffix := range suffixes {
		names[i] = indexName(s.q.table, suffix)
	}
	var n int
	if err := queryOne(ctx, s.c, query, []any{s.q.quoted, names}, &n); err != nil {
		return false, s.q.interpretError("inspecting", err)
	}
	return n > 0, nil
}

// execDDL runs one CREATE ... IF NOT EXISTS statement of CreateTable. On PostgreSQL one that lost a
// race with the same statement of another session runs again (package internal/pgddl). Its error is
// never taken for a record's (a unique violation is not idemkit.ErrExists here).
func (s *Store) execDDL(ctx context.Context, stmt string) error {
	for attempt := 0; ; attempt++ {
		_, err := s.c.exec(ctx, stmt)
		switch {
		case err == nil:
			return nil
		case s.q.dialect == dialectPostgres && !s.inTx && attempt < pgddl.RaceRetries && ctx.Err() == nil && pgddl.LostCreateRace(err):
			continue
		case isUniqueViolation(s.q.dialect, err):
			return fmt.Errorf("record: creating table %s: %w", s.q.name, err)
		}
		return s.q.interpretError("creating table", err)
	}
}

// DDL returns the statements CreateTable runs on a new table, as one text: the records DDL of package
// github.com/idemkit/idemkit/sql for the Store's dialect, renamed for Options.Table.
func (s *Store) DDL() (string, error) {
	ddl, err := idemsql.Records(s.q.dialect)
	if err != nil {
		return "", err
	}
	return s.q.renderDDL(ddl), nil
}

// Migrate upgrades the Store's table from the v1 layout (an AUTO_INCREMENT id primary key, UNIQUE
// (scope, idem_key) and two secondary indexes) to v2 (primary key (scope, idem_key), one secondary
// index (status, expires_at)), running the migrate_v1_to_v2 file of package
// github.com/idemkit/idemkit/sql for the Store's dialect and table, statement by statement on one
// connection. It fails when the table does not exist, and does nothing on a v2 table (on
// PostgreSQL, one left with v1's indexes by a run that failed after the primary key swap gets them
// dropped). Records keep every value: nothing but the keys change.
//
// Run it once, after every process sharing the table runs this version (which works on either
// layout; the previous one does not work on v2). On MySQL/MariaDB it is one online ALTER TABLE
// (ALGORITHM=INPLACE, LOCK=NONE: reads and writes go on while the table is rebuilt; it gives up
// after waiting 10s for its metadata lock behind an open transaction; on a Galera cluster it runs in
// Total Order Isolation instead: no write commits anywhere in the cluster until the table is rebuilt,
// and transactions open on the table are rolled back, error 1213, rather than waited for); on PostgreSQL
// the indexes are built and dropped CONCURRENTLY and the primary key swapped in one short
// transaction (each index build, once built, waits for every transaction of the database holding an
// older snapshot to end, on any table: a REPEATABLE READ transaction, a running pg_dump; reads and
// writes go on meanwhile); on SQLite the table is copied in one transaction. See the README's "Upgrading from
// v1". It returns the first failing statement's error; every step can be run again. Its context
// bounds it: the session's statement timeout (PostgreSQL statement_timeout, MariaDB
// max_statement_time, set by the DSN or the role for the application's queries) is lifted for its
// connection, lock timeouts are not, and a statement the context cuts short is ended on the server
// too (on MySQL/MariaDB with KILL QUERY, on another connection of the pool: the ALTER rolls back,
// the table stays v1). Several
// processes may run it at once (replicas starting together): one migrates, the others wait for it
// (a named lock on MySQL, an advisory lock on PostgreSQL, the file's transaction on SQLite) and then
// find the table migrated; the connection Migrate uses is the only one it takes from the pool, but
// for that KILL QUERY.
func (s *Store) Migrate(ctx context.Context) error {
	if s.inTx || s.sdb == nil {
		return errors.New("record: Migrate needs a Store on a gorm.DB whose pool is a *sql.DB, not bound to a transaction")
	}
	text, err := idemsql.Migration(s.q.dialect)
	if err != nil {
		return err
	}
	conn, err := s.sdb.Conn(ctx)
	if err != nil {
		return s.q.interpretError("migrating", err)
	}
	cut, err := s.migrateOn(ctx, conn, text)
	if s.q.dialect != dialectSQLite {
		// The connection goes, not back to the pool: the file sets the session's lock_wait_timeout
		// (MySQL), and the session holds the migration lock until it ends.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = conn.Close()
	if cut != 0 {
		// Released first: the pool may have no other connection for the KILL.
		err = errors.Join(err, s.killQuery(ctx, cut))
	}
	return err
}

// migrateOn is Migrate's work on conn, the migration file's text. When ctx ended while a statement of
// the file ran on MySQL/MariaDB, it returns that session's connection id, for killQuery: the driver
// gives up on the statement (it closes the connection), but the server goes on running it — a table
// rebuild then completes after Migrate reported its failure. PostgreSQL's driver cancels the
// statement on the server itself, and SQLite's runs in the process.
func (s *Store) migrateOn(ctx context.Context, conn *sql.Conn, text string) (cut int64, err error) {
	var session int64
	if s.q.dialect != dialectSQLite {
		if err := unboundStatements(ctx, s.q.dialect, conn); err != nil {
			return 0, s.q.interpretError("migrating", err)
		}
		// Replicas that each run Migrate as they start would otherwise run the file at once: the
		// later ALTERs fail on a table already migrated (MySQL), the concurrent index builds
		// deadlock or drop each other's index (PostgreSQL). One runs; the others wait, then find v2.
		// (SQLite's file runs in one BEGIN IMMEDIATE transaction: runs are serialised already.)
		if err := s.lockMigration(ctx, conn); err != nil {
			return 0, err
		}
		if s.q.dialect == dialectMySQL {
			if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&session); err != nil {
				return 0, s.q.interpretError("migrating", err)
			}
		}
	}
	on := *s // the Store's reads on conn: the pool may have no other connection to spare
	on.c = poolConn{p: conn}
	v1, err := on.isV1(ctx)
	if err != nil {
		return 0, err
	}
	stmts := idemsql.Statements(s.q.renderDDL(text))
	if !v1 {
		// On PostgreSQL a run that failed after the primary key swap (the id column is gone), in one
		// of the file's closing DROP INDEX CONCURRENTLY statements, left v1's indexes: finish it.
		left, err := on.v1Leftovers(ctx)
		if err != nil || !left {
			return 0, err
		}
		stmts = slices.DeleteFunc(stmts, func(stmt string) bool { return !strings.HasPrefix(stmt, "DROP INDEX CONCURRENTLY") })
	}
	for _, stmt := range stmts {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			if s.q.dialect == dialectSQLite {
				_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
			}
			if ctx.Err() != nil {
				cut = session
			}
			if on.migrated(ctx) {
				return cut, nil // by a run that took no lock (on Galera, or the file applied by hand)
			}
			return cut, s.q.interpretError("migrating", fmt.Errorf("%w (statement: %.80s...)", err, stmt))
		}
	}
	return 0, nil
}

// killQueryTimeout bounds killQuery.
const killQueryTimeout = 5 * time.Second

// killQuery ends, on the server, the statement MySQL/MariaDB session id still runs after the driver
// gave up on it (see migrateOn): an ALTER TABLE so killed rolls back, leaving the table as it was. It
// returns an error when the KILL could not be sent, saying the statement may still run; a session
// that ended meanwhile (ER_NO_SUCH_THREAD) is none.
func (s *Store) killQuery(ctx context.Context, id int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killQueryTimeout)
	defer cancel()
	_, err := s.sdb.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", id))
	var my *mysql.MySQLError
	if err == nil || errors.As(err, &my) && my.Number == mysqlNoSuchThread {
		return nil
	}
	return fmt.Errorf("record: migrating %s: the statement cut short may still run on the server (KILL QUERY %d: %w)", s.q.name, id, err)
}

// mysqlNoSuchThread is ER_NO_SUCH_THREAD: KILL of a session that has ended.
const mysqlNoSuchThread = 1094

// unboundStatements lifts, for the session of conn, the bound on a statement's run time its DSN or
// role may set for the application's queries (PostgreSQL statement_timeout, MariaDB
// max_statement_time; MySQL's max_execution_time bounds SELECTs alone): an index build or a table
// rebuild takes as long as the table's size asks, so a migration cut short by it would fail again on
// every run. Migrate is bounded by its context instead. Lock waits keep their bounds (lock_timeout,
// and the file's own): those a later run may not meet.
func unboundStatements(ctx context.Context, dialect string, conn *sql.Conn) error {
	stmt := "SET statement_timeout = 0"
	if dialect == dialectMySQL {
		stmt = "SET SESSION max_statement_time = 0"
	}
	_, err := conn.ExecContext(ctx, stmt)
	var my *mysql.MySQLError
	if errors.As(err, &my) && my.Number == mysqlUnknownVariable {
		return nil // MySQL: no such bound on DDL
	}
	return err
}

// migrated reports whether the Store's table is a v2 table with nothing left of v1.
func (s *Store) migrated(ctx context.Context) bool {
	v1, err := s.isV1(ctx)
	if err != nil || v1 {
		return false
	}
	left, err := s.v1Leftovers(ctx)
	return err == nil && !left
}

// migrateLockPoll is how often a Migrate waiting for another one's migration asks for its lock again.
const migrateLockPoll = 200 * time.Millisecond

// lockMigration takes, for the session of conn, the lock that makes one Migrate of the Store's table
// run at a time (MySQL and PostgreSQL): a named lock (GET_LOCK) or an advisory lock, held until
// the session ends. It asks without waiting and asks again every migrateLockPoll until ctx ends: a
// PostgreSQL session waiting for a lock would hold a snapshot, which the holder's CREATE INDEX
// CONCURRENTLY waits for.
func (s *Store) lockMigration(ctx context.Context, conn *sql.Conn) error {
	var query string
	var args []any
	if s.q.dialect == dialectMySQL {
		// Named locks do not span a Galera cluster (its nodes refuse them): there the DDL runs in
		// the cluster's total order, and a run that finds the table migrated by another succeeds
		// all the same (see Migrate).
		if galera, err := isGalera(ctx, conn); err != nil || galera {
			return s.q.interpretError("taking the migration lock of", err)
		}
		// Named for the table (a lock name is at most 64 characters).
		query = "SELECT GET_LOCK(CONCAT('idemkit_migrate_', LEFT(SHA2(CONCAT(COALESCE(?, DATABASE(), ''), '.', ?), 256), 48)), 0)"
		args = []any{sql.NullString{String: s.q.schema, Valid: s.q.schema != ""}, s.q.table}
	} else {
		// Keyed by the table the Store's statements name (through search_path when unqualified).
		query = "SELECT pg_try_advisory_lock(hashtextextended('idemkit migrate ' || COALESCE(to_regclass($1::text)::oid::text, $1::text), 0))"
		args = []any{s.q.quoted}
	}
	for {
		var held sql.NullBool
		if err := conn.QueryRowContext(ctx, query, args...).Scan(&held); err != nil {
			return s.q.interpretError("taking the migration lock of", err)
		}
		switch {
		case !held.Valid:
			return fmt.Errorf("record: migrating %s: the database refused the migration lock", s.q.name)
		case held.Bool:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("record: migrating %s: waiting for another migration of the table: %w", s.q.name, ctx.Err())
		case <-time.After(migrateLockPoll):
		}
	}
}

// isV1 reports whether the Store's table has the v1 id column; an error when there is no such table.
func (s *Store) isV1(ctx context.Context) (bool, error) {
	columns, id, err := s.tableColumns(ctx)
	if err != nil {
		return false, err
	}
	if columns == 0 {
		return false, fmt.Errorf("record: migrating %s: the table does not exist", s.q.name)
	}
	return id > 0, nil
}

// tableColumns returns how many columns the Store's table has (0 when there is no such table) and
// whether one of them is v1's id (1 or 0).
func (s *Store) tableColumns(ctx context.Context) (columns, id int, err error) {
	var query string
	args := []any{s.q.table}
	switch s.q.dialect {
	case dialectMySQL:
		query = "SELECT count(*), COALESCE(SUM(column_name = 'id'), 0) FROM information_schema.columns WHERE table_name = ? AND table_schema = "
		if s.q.schema != "" {
			query += "?"
			args = append(args, s.q.schema)
		} else {
			query += "DATABASE()"
		}
	case dialectPostgres:
		// The table the Store's statements name, found as they find it (through search_path when it
		// is not qualified): current_schema() is only the first schema of the path that exists.
		query = "SELECT count(*), count(*) FILTER (WHERE attname = 'id') FROM pg_attribute " +
			"WHERE attrelid = to_regclass($1::text) AND attnum > 0 AND NOT attisdropped"
		args = []any{s.q.quoted}
	default:
		query = "SELECT count(*), COALESCE(SUM(name = 'id'), 0) FROM pragma_table_info(?)"
		if s.q.schema != "" {
			query = "SELECT count(*), COALESCE(SUM(name = 'id'), 0) FROM pragma_table_info(?, ?)"
			args = append(args, s.q.schema)
		}
	}
	if err := queryOne(ctx, s.c, query, args, &columns, &id); err != nil {
		return 0, 0, s.q.interpretError("inspecting", err)
	}
	return columns, id, nil
}

// v1Leftovers reports whether the Store's table, on PostgreSQL, still has an index the migration
// drops at its end (v1's two secondary indexes, or the new primary key's index of a run on a table
// already migrated). It is false on the other databases, whose migration is one statement or one
// transaction.
func (s *Store) v1Leftovers(ctx context.Context) (bool, error) {
	if s.q.dialect != dialectPostgres {
		return false, nil
	}
	return s.hasPostgresIndex(ctx, "_expires_at_idx", "_status_lease_idx", "_pk_v2")
}
