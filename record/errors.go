package record

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
)

// Unique-violation codes.
const (
	mysqlDupEntry           = 1062    // ER_DUP_ENTRY (MySQL and MariaDB)
	postgresUniqueViolation = "23505" // unique_violation
	sqliteConstraintUnique  = 2067    // SQLITE_CONSTRAINT_UNIQUE
	sqliteConstraintPK      = 1555    // SQLITE_CONSTRAINT_PRIMARYKEY
)

// interpretError translates a backend error: a unique violation becomes idemkit.ErrExists, anything
// else is wrapped with what was being done. nil stays nil.
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
	return fmt.Errorf("record: %s %s: %w", doing, q.name, err)
}

// Data-error codes: the database refused a value itself (too long, not valid in its encoding).
const (
	mysqlDataTooLong       = 1406 // ER_DATA_TOO_LONG
	mysqlIncorrectString   = 1366 // ER_TRUNCATED_WRONG_VALUE_FOR_FIELD ("Incorrect string value")
	mysqlInvalidCharString = 1300 // ER_INVALID_CHARACTER_STRING
	mysqlPacketTooLarge    = 1153 // ER_NET_PACKET_TOO_LARGE
	postgresDataException  = "22" // class 22: data_exception (string too long, bad encoding, NUL)
	postgresLimitExceeded  = "54000"
	sqliteTooBig           = 18 // SQLITE_TOOBIG
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
		var e interface{ SQLState() string }
		if errors.As(err, &e) {
			st := e.SQLState()
			return strings.HasPrefix(st, postgresDataException) || st == postgresLimitExceeded
		}
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
		var e interface{ SQLState() string }
		return errors.As(err, &e) && e.SQLState() == postgresUniqueViolation
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

// Deadlock codes: the database chose the statement as a deadlock victim and rolled it back.
const (
	mysqlDeadlock    = 1213    // ER_LOCK_DEADLOCK
	postgresDeadlock = "40P01" // deadlock_detected
)

// isDeadlock reports whether err says the statement was rolled back as a deadlock victim.
func isDeadlock(dialect string, err error) bool {
	switch dialect {
	case dialectMySQL:
		var e *mysql.MySQLError
		return errors.As(err, &e) && e.Number == mysqlDeadlock
	case dialectPostgres:
		var e interface{ SQLState() string }
		return errors.As(err, &e) && e.SQLState() == postgresDeadlock
	}
	return false
}
