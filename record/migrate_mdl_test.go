package record

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
)

// TestMigrateMySQLGivesUpOnMetadataLock: the MySQL/MariaDB migration's ALTER TABLE needs an exclusive
// metadata lock at its start, and waits for it behind any open transaction that read or wrote the
// table; while it waits, every later statement on the table queues behind it. The PostgreSQL file
// bounds its lock wait (lock_timeout 10s, "give up rather than queue every query behind a long
// transaction"); the MySQL one did not, so the ALTER waited for lock_wait_timeout, a day on MariaDB
// by default, with the application's traffic on the table stopped all along — and ending Migrate's
// context does not end the server's wait. It must give up, and can then be run again.
func TestMigrateMySQLGivesUpOnMetadataLock(t *testing.T) {
	db := backends[0].db(t, nil) // MySQL/MariaDB
	sqlDB, _ := db.DB()
	sqlDB.SetMaxOpenConns(2) // the blocker's and Migrate's, checked afterwards
	s := v1Table(t, db)
	table := s.q.quoted
	must(t, db.Exec("INSERT INTO "+table+" (scope, idem_key, status, fence, owner, error) VALUES ('s', 'k', 'SUCCEEDED', 1, 'o', '')").Error)

	var before int64
	must(t, db.Raw("SELECT @@session.lock_wait_timeout").Scan(&before).Error)
	if before <= 10 {
		t.Skipf("the test connection's lock_wait_timeout is %ds already", before)
	}

	// A long transaction that read the table holds a shared metadata lock until it ends.
	blocker := db.Begin()
	var n int
	must(t, blocker.Raw("SELECT count(*) FROM "+table).Scan(&n).Error)
	done := make(chan error, 1)
	go func() { done <- s.Migrate(ctxb) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Duration(before) * time.Second / 2):
		blocker.Rollback()
		<-done
		t.Fatal("Migrate waited for the table's metadata lock behind an open transaction, stopping the table's traffic, without giving up")
	}
	blocker.Rollback()
	var me *mysqldrv.MySQLError
	if !errors.As(err, &me) || me.Number != 1205 {
		t.Fatalf("Migrate behind an open transaction: %v; want a lock wait timeout (1205)", err)
	}
	// The pool's connections keep the session's own lock_wait_timeout (the test DSN's).
	conns := make([]*sql.Conn, 2)
	for i := range conns {
		c, err := sqlDB.Conn(ctxb)
		must(t, err)
		conns[i] = c
	}
	for _, c := range conns {
		var timeout int64
		must(t, c.QueryRowContext(ctxb, "SELECT @@session.lock_wait_timeout").Scan(&timeout))
		c.Close()
		if timeout != before {
			t.Fatalf("a pooled connection has lock_wait_timeout %d, had %d: it kept the migration's", timeout, before)
		}
	}

	must(t, s.Migrate(ctxb)) // the transaction is gone: run it again
	checkV2Layout(t, s, db)
}

// TestMigrateMissingTable: Migrate of a table that does not exist (a mistyped Options.Table, a
// PostgreSQL table outside search_path, the wrong database in the DSN) found no v1 id column, took
// the table for a v2 one and reported success: the real v1 table stayed as it was, and nothing said
// so. It fails, saying the table is not there.
func TestMigrateMissingTable(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, err := New(b.db(t, nil), &Options{Table: "no_such_table_v1"})
		must(t, err)
		if err := s.Migrate(ctxb); err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("Migrate of a missing table: %v; want an error saying it does not exist", err)
		}
	})
}
