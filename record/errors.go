package record

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/ownedtx"
)

// Unique-violation codes.
const (
	mysqlDupEntry           = 1062    // ER_DUP_ENTRY (MySQL and MariaDB)
	postgresUniqueViolation = "23505" // unique_violation
	sqliteConstraintUnique  = 2067    // SQLITE_CONSTRAINT_UNIQUE
	sqliteConstraintPK      = 1555    // SQLITE_CONSTRAINT_PRIMARYKEY
)

// ErrConflict is wrapped (with the driver's error) in the error of a statement whose transaction the
// database rolled back to resolve a write conflict: an InnoDB deadlock, a Galera certification
// failure or brute-force abort (MySQL/MariaDB error 1213, "WSREP detected deadlock/conflict and
// aborted the transaction"), or a PostgreSQL deadlock or serialization failure. Nothing of that
// transaction was applied, and a run of it from the start may succeed: outside a caller's transaction
// the Store already ran the statement again a few times; on a Store bound to a caller's transaction
// (WithTx, WithSQLTx) the whole transaction is gone — on MySQL later statements on the same
// connection would run outside any transaction — so do not commit it: run the whole transaction
// again, which will then see the conflicting writer's record. The COMMIT of a transaction the Store
// began ([Store.Tx], [Store.TxMark], [Store.SQLTx]) wraps it too when it fails so (Galera certifies a
// transaction when it commits). [IsConflict] recognises it, and the driver's error of the same
// rollback at the caller's own COMMIT.
//
// It matches [idemkit.ErrConflict], which the Guard recognises.
var ErrConflict error = conflictError{}

// conflictError is ErrConflict's type.
type conflictError struct{}

func (conflictError) Error() string {
	return "record: transaction rolled back by the database on a write conflict (a deadlock, a serialization failure, a Galera certification failure, a unique index being built); run it again"
}

func (conflictError) Is(target error) bool { return target == idemkit.ErrConflict }

// IsConflict reports whether err says the database rolled a transaction back to resolve a write
// conflict, so that running the whole transaction again may succeed: an error wrapping
// [ErrConflict], or a driver error of a deadlock (MySQL/MariaDB 1213, which Galera also returns for a
// certification failure, PostgreSQL 40P01) or a serialization failure (PostgreSQL 40001, MariaDB 1020
// under innodb_snapshot_isolation, the default from 11.6), as
// returned by a statement or by COMMIT (for instance by gorm.DB.Transaction). It sees through
// wrapping, including a Guard's ErrStoreUnavailable.
func IsConflict(err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, ErrConflict) || ownedtx.Conflict(err)
}

// IsConflict is the package's [IsConflict], for the Guard: it asks it of the error of a function
// guarded in a caller's transaction ([idemkit.Guard.DoTx]), after which nothing may be written in
// that transaction — on MySQL and MariaDB a deadlock leaves the connection outside any transaction,
// where a record would commit on its own.
func (s *Store) IsConflict(err error) bool { return IsConflict(err) }

// interpretError translates a backend error: a unique violation becomes idemkit.ErrExists; a
// transaction rolled back on a write conflict wraps ErrConflict; a Galera node that cannot take
// queries says so; anything else is wrapped with what was being done. nil stays nil.
//
// A conflict is not mapped to ErrExists even for an Insert, although the conflicting writer is most
// likely a duplicate of the same key: in a caller's transaction everything before the statement was
// rolled back, and answering "exists" would let the caller go on (and commit its later statements one
// by one, outside any transaction). Outside a transaction the Store has already retried the statement
// (see exec), and a retry of a conflicting Insert finds the record and returns ErrExists.
func (q *queries) interpretError(doing string, err error) error {
	if err == nil {
		return nil
	}
	if isUniqueViolation(q.dialect, err) {
		return idemkit.ErrExists
	}
	if isDataError(q.dialect, err) {
		return fmt.Errorf("record: %s %s: %w: %w", doing, q.name, idemkit.ErrUnstorable, err)
	}
	if IsConflict(err) {
		return fmt.Errorf("record: %s %s: %w: %w", doing, q.name, ErrConflict, err)
	}
	if isGaleraNotReady(q.dialect, err) {
		return fmt.Errorf("record: %s %s: the Galera node does not accept queries (not synced with its cluster, or cut off from the primary component): use another node: %w", doing, q.name, err)
	}
	if q.dialect == dialectPostgres && sqlState(err) == postgresTxAborted {
		return fmt.Errorf("record: %s %s: %w: %w", doing, q.name, ErrTxAborted, err)
	}
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("record: %s %s: the transaction had already ended (a function guarded by Store.SQLTx must not commit or roll back its *sql.Tx, nor a caller end the transaction it bound with WithSQLTx or WithTx before DoTx returns): %w", doing, q.name, err)
	}
	return fmt.Errorf("record: %s %s: %w", doing, q.name, err)
}

// ErrTxAborted is wrapped (with the driver's error) in the error of a statement of a transaction that
// an earlier statement's failure aborted (PostgreSQL 25P02, in_failed_sql_transaction), or ended (a
// MySQL/MariaDB deadlock, see [Store.WithSealedTx]): the record's write after a function guarded in
// Tx mode ignored a failed statement's error and returned nil.
// Nothing of the transaction commits. It is the function's fault, not the database's: every run of
// the same function on the same input fails the same way (msgx counts it against
// Options.MaxAttempts as the handler's failure). The Guard's error still matches
// idemkit.ErrStoreUnavailable (nothing was written, the call may be retried).
var ErrTxAborted = errors.New("the transaction is aborted: an earlier statement in it failed, and the database runs no statement after that in it (a function guarded in Tx mode must return its statements' errors)")

// Data-error codes: the database refused a value itself (too long, not valid in its encoding).
const (
	mysqlDataTooLong       = 1406 // ER_DATA_TOO_LONG
	mysqlIncorrectString   = 1366 // ER_TRUNCATED_WRONG_VALUE_FOR_FIELD ("Incorrect string value")
	mysqlInvalidCharString = 1300 // ER_INVALID_CHARACTER_STRING
	mysqlPacketTooLarge    = 1153 // ER_NET_PACKET_TOO_LARGE
	postgresDataException  = "22" // class 22: data_exception (string too long, bad encoding, NUL)
	postgresLimitExceeded  = "54000"
	postgresTxAborted      = "25P02" // in_failed_sql_transaction
	sqliteTooBig           = 18      // SQLITE_TOOBIG
)

// isDataError reports whether err says the database refused one of the values it was given, as
// opposed to being unavailable: writing the same values again would fail the same way.
func isDataError(dialect string, err error) bool {
	switch dialect {
	case dialectMySQL:
		if errors.Is(err, mysql.ErrPktTooLarge) {
			return true
		}
		var e *mysql.MySQLError
		if errors.As(err, &e) {
			switch e.Number {
			case mysqlDataTooLong, mysqlIncorrectString, mysqlInvalidCharString, mysqlPacketTooLarge:
				return true
			}
		}
	case dialectPostgres:
		st := sqlState(err)
		return strings.HasPrefix(st, postgresDataException) || st == postgresLimitExceeded
	case dialectSQLite:
		var e interface{ Code() int }
		return errors.As(err, &e) && e.Code() == sqliteTooBig
	}
	return false
}

// isUniqueViolation recognises a unique-key violation of dialect's drivers: go-sql-driver/mysql,
// pgx or lib/pq (anything with SQLState), glebarez/go-sqlite or modernc (anything with Code) and the
// cgo mattn/go-sqlite3 (by its message), and gorm's translated ErrDuplicatedKey (TranslateError).
func isUniqueViolation(dialect string, err error) bool {
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return true
	}
	switch dialect {
	case dialectMySQL:
		var e *mysql.MySQLError
		return errors.As(err, &e) && e.Number == mysqlDupEntry
	case dialectPostgres:
		return sqlState(err) == postgresUniqueViolation
	case dialectSQLite:
		var e interface{ Code() int }
		if errors.As(err, &e) {
			c := e.Code()
			return c == sqliteConstraintUnique || c == sqliteConstraintPK
		}
		return strings.Contains(err.Error(), "UNIQUE constraint failed")
	}
	return false
}

// mysqlUnknownCommand is what a Galera node answers while it is not ready for queries ("WSREP has not
// yet prepared node for application use").
const mysqlUnknownCommand = 1047 // ER_UNKNOWN_COM_ERROR

// isGaleraNotReady reports whether err is a Galera node refusing queries because it is not synced
// or not in the primary component.
func isGaleraNotReady(dialect string, err error) bool {
	var e *mysql.MySQLError
	return dialect == dialectMySQL && errors.As(err, &e) && e.Number == mysqlUnknownCommand && strings.Contains(e.Message, "WSREP")
}

// Lock-wait timeout codes: a statement waited for a lock longer than the session allows.
const (
	mysqlLockWaitTimeout = 1205    // ER_LOCK_WAIT_TIMEOUT (innodb_lock_wait_timeout)
	postgresLockTimeout  = "55P03" // lock_not_available (lock_timeout)
)

// lockWaitTimedOut reports whether err says a statement gave up waiting for a lock after the lock
// wait timeout of its session (PostgreSQL lock_timeout, InnoDB innodb_lock_wait_timeout, set by the
// DSN, the role or the database).
func lockWaitTimedOut(dialect string, err error) bool {
	switch dialect {
	case dialectMySQL:
		var e *mysql.MySQLError
		return errors.As(err, &e) && e.Number == mysqlLockWaitTimeout
	case dialectPostgres:
		return sqlState(err) == postgresLockTimeout
	}
	return false
}

// heldElsewhere returns the error of a record's INSERT, or of a locking read or takeover of it in a
// transaction, that gave up waiting for its lock (see lockWaitTimedOut), or nil for any other err.
// The lock such a statement waits for is the key's row, written by another attempt whose transaction
// has not committed yet (a mark and its function, a Tx-mode record and its COMMIT, a takeover) — or,
// rarely, the whole table's (the v1→v2 migration's brief ACCESS EXCLUSIVE lock, an operator's DDL):
// either way the key is busy for a while and nothing of the statement was written. The error matches
// idemkit.ErrInFlight: the Guard answers in flight, as when it meets the committed claim.
func (q *queries) heldElsewhere(doing string, err error) error {
	if !lockWaitTimedOut(q.dialect, err) {
		return nil
	}
	return fmt.Errorf("record: %s %s: the key's record (or the table) stayed locked by another transaction — most often another attempt's write of the key, not committed yet — longer than the session's lock wait timeout: %w: %w",
		doing, q.name, &idemkit.InFlightError{}, err)
}

// rolledBackAlone reports whether err says a statement run as its own transaction was rolled back on a
// write conflict, so that running it again may succeed: as a deadlock victim, or on PostgreSQL with a
// serialization failure (a REPEATABLE READ or SERIALIZABLE statement that waited for a row committed
// after its snapshot).
func rolledBackAlone(dialect string, err error) bool {
	return (dialect == dialectMySQL || dialect == dialectPostgres) && ownedtx.Conflict(err)
}

// sqlState returns the SQLSTATE code of a PostgreSQL error (pgx or lib/pq: anything with SQLState),
// "" for any other error.
func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}
