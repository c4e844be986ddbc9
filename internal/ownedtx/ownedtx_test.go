package ownedtx_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit/internal/ownedtx"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestFailedEndLeavesNothingOpenOnThePool: a transaction whose COMMIT or ROLLBACK the server refused
// while keeping it open (a Galera node without a primary component) must not reach the pool's next
// user, who would join it or commit it. Transaction (the barrier's and dtmmsg's local transaction) and
// BeginSQL, on a pool of one connection; each end failing, and a panic in fn.
func TestFailedEndLeavesNothingOpenOnThePool(t *testing.T) {
	fc, db, sqlDB := testsvc.FailEndsMySQL(t)
	other, err := sql.Open("mysql", testsvc.MySQLDSN()+testsvc.Database)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	table := testsvc.Name("owned_")
	testsvc.DropTable(t, db, table)
	if err := db.Exec("CREATE TABLE " + table + " (k VARCHAR(64) NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	rows := func(k string) int {
		var n int
		if err := other.QueryRow("SELECT COUNT(*) FROM "+table+" WHERE k = ?", k).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	ctx := context.Background()
	insert := "INSERT INTO " + table + " (k) VALUES (?)"
	failed := errors.New("the business failed")
	// The same pool in gorm.Config's PrepareStmt mode.
	configPrepared, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Discard, PrepareStmt: true})
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		run  func(key string) error
	}{
		{"Transaction/commit", func(key string) error {
			fc.FailCommit.Store(true)
			return ownedtx.Transaction(ctx, db, func(tx *gorm.DB) error { return tx.Exec(insert, key).Error })
		}},
		{"Transaction/rollback", func(key string) error {
			fc.FailRollback.Store(true)
			err := ownedtx.Transaction(ctx, db, func(tx *gorm.DB) error {
				if err := tx.Exec(insert, key).Error; err != nil {
					return err
				}
				return failed
			})
			if !errors.Is(err, failed) {
				t.Errorf("Transaction = %v, want fn's error", err)
			}
			return err
		}},
		{"Transaction/panic", func(key string) (err error) {
			fc.FailRollback.Store(true)
			defer func() {
				if recover() == nil {
					t.Error("the panic did not go on")
				}
				err = failed
			}()
			return ownedtx.Transaction(ctx, db, func(tx *gorm.DB) error {
				if err := tx.Exec(insert, key).Error; err != nil {
					return err
				}
				panic("the business panicked")
			})
		}},
		{"Transaction/PrepareStmt/commit", func(key string) error {
			fc.FailCommit.Store(true)
			prepared := db.Session(&gorm.Session{PrepareStmt: true})
			return ownedtx.Transaction(ctx, prepared, func(tx *gorm.DB) error { return tx.Exec(insert, key).Error })
		}},
		{"Transaction/PrepareStmt in Config and Session/commit", func(key string) error {
			fc.FailCommit.Store(true)
			prepared := configPrepared.Session(&gorm.Session{PrepareStmt: true})
			return ownedtx.Transaction(ctx, prepared, func(tx *gorm.DB) error { return tx.Exec(insert, key).Error })
		}},
		{"Transaction/PrepareStmt in Config/commit", func(key string) error {
			fc.FailCommit.Store(true)
			return ownedtx.Transaction(ctx, configPrepared, func(tx *gorm.DB) error { return tx.Exec(insert, key).Error })
		}},
		{"BeginSQL/commit", func(key string) error {
			fc.FailCommit.Store(true)
			tx, err := ownedtx.BeginSQL(ctx, sqlDB)
			if err != nil {
				return err
			}
			if _, err := tx.SQL.Exec(insert, key); err != nil {
				return err
			}
			return tx.Commit()
		}},
		{"BeginSQL/rollback", func(key string) error {
			fc.FailRollback.Store(true)
			tx, err := ownedtx.BeginSQL(ctx, sqlDB)
			if err != nil {
				return err
			}
			if _, err := tx.SQL.Exec(insert, key); err != nil {
				return err
			}
			return tx.Rollback()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.name
			err := tc.run(key)
			fc.FailCommit.Store(false)
			fc.FailRollback.Store(false)
			if err == nil {
				t.Fatal("no error; want the failed end's")
			}
			after := key + "/after"
			if err := db.Exec(insert, after).Error; err != nil {
				t.Fatal(err)
			}
			if err := db.Transaction(func(tx *gorm.DB) error { return tx.Exec(insert, after+"/tx").Error }); err != nil {
				t.Fatal(err)
			}
			if n := rows(after); n != 1 {
				t.Errorf("an autocommit INSERT after the failed end: %d rows seen by another connection, want 1", n)
			}
			if n := rows(key); n != 0 {
				t.Errorf("the write of the transaction whose end failed: %d rows committed, want 0", n)
			}
		})
	}

	// In a transaction already, Transaction is gorm's: a savepoint of it.
	err = db.Transaction(func(outer *gorm.DB) error {
		if err := ownedtx.Transaction(ctx, outer, func(tx *gorm.DB) error { return tx.Exec(insert, "nested").Error }); err != nil {
			return err
		}
		return ownedtx.Transaction(ctx, outer, func(tx *gorm.DB) error {
			if err := tx.Exec(insert, "nested-undone").Error; err != nil {
				return err
			}
			return failed
		})
	})
	if !errors.Is(err, failed) {
		t.Fatalf("nested = %v", err)
	}
	if rows("nested") != 0 || rows("nested-undone") != 0 {
		t.Fatal("the outer transaction rolled back, yet a nested write committed")
	}
}
