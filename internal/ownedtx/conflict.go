package ownedtx

import (
	"context"
	"errors"

	"github.com/go-sql-driver/mysql"
)

// The driver errors of a transaction the database rolled back whole to resolve a write conflict.
// Galera reports a transaction that failed certification, or was aborted by a conflicting replicated
// write set, with the MySQL deadlock code.
const (
	MySQLDeadlock = 1213 // ER_LOCK_DEADLOCK
	// MySQLRecordChanged is MariaDB's ER_CHECKREAD under innodb_snapshot_isolation (the default from
	// 11.6): a REPEATABLE READ write to, or locking read of, a row changed since the transaction's read
	// view. The server rolls the whole transaction back, as for a deadlock.
	MySQLRecordChanged    = 1020
	PostgresDeadlock      = "40P01" // deadlock_detected
	PostgresSerialization = "40001" // serialization_failure
)

// Conflict reports whether err is a driver's error saying the database rolled a transaction back to
// resolve a write conflict, so that running it again from its start may succeed: a deadlock
// (MySQL/MariaDB 1213, PostgreSQL 40P01) or a serialization failure (PostgreSQL 40001, MariaDB 1020
// under innodb_snapshot_isolation). It sees through wrapping.
func Conflict(err error) bool {
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		return MySQLConflict(my.Number)
	}
	var pg interface{ SQLState() string }
	return errors.As(err, &pg) && (pg.SQLState() == PostgresDeadlock || pg.SQLState() == PostgresSerialization)
}

// MySQLConflict reports whether a MySQL/MariaDB error number says the server rolled the whole
// transaction back on a write conflict (MySQLDeadlock, MySQLRecordChanged).
func MySQLConflict(n uint16) bool { return n == MySQLDeadlock || n == MySQLRecordChanged }

// ConflictRetries bounds the runs again of a statement or transaction that the database rolled back
// on a write conflict.
const ConflictRetries = 3

// RunAgain reports whether what failed on its attempt (from 0) is to be run again: conflict says the
// database rolled it back on a write conflict (see [Conflict]), fewer than ConflictRetries runs again
// were made, and ctx still lives.
func RunAgain(ctx context.Context, attempt int, conflict bool) bool {
	return conflict && attempt < ConflictRetries && ctx.Err() == nil
}
