package barrier

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit/internal/testsvc"
)

// freshTableName returns a table name for a barrier table that does not exist yet, dropped (on
// PostgreSQL with its schema, to exercise CREATE SCHEMA too) when t ends.
func freshTableName(t *testing.T, db *gorm.DB) string {
	t.Helper()
	if db.Dialector.Name() == "postgres" {
		schema := testsvc.Name("bar_cc_")
		t.Cleanup(func() {
			if err := db.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE").Error; err != nil {
				t.Logf("dropping schema %s: %v", schema, err)
			}
		})
		return schema + ".barrier"
	}
	table := testsvc.Name("bar_cc_")
	testsvc.DropTable(t, db, table)
	return table
}

// TestGormCreateTableConcurrently runs CreateTable in several sessions at once for a table that does
// not exist, as the replicas of a service do when they start together. On PostgreSQL a CREATE ... IF NOT
// EXISTS that checks for its object before another session committed it fails once the other did
// (23505 on the catalog's unique index, or 42P07/42710): every CreateTable must still succeed.
func TestGormCreateTableConcurrently(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		if db.Dialector.Name() == "sqlite" {
			t.Skip("one file, one writer: the sessions take turns")
		}
		for round := range 6 {
			table := freshTableName(t, db)
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					g, err := NewGorm(db, &GormOptions{Table: table})
					if err == nil {
						err = g.CreateTable(context.Background())
					}
					errs[i] = err
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatalf("round %d: CreateTable beside others: %v", round, err)
				}
			}
			g, err := NewGorm(db, &GormOptions{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if g.d.indexExists != "" {
				var n int
				if err := db.Raw(strings.NewReplacer("$1", "?", "$2", "?").Replace(g.d.indexExists), g.d.quoted, g.d.index).Scan(&n).Error; err != nil || n != 1 {
					t.Fatalf("round %d: index %s: %d, %v", round, g.d.index, n, err)
				}
			}
			b, _ := NewBranch(TransSaga, testsvc.Name("gid-"), "01", OpAction)
			if _, err := g.TransactionOutcome(context.Background(), b, func(*gorm.DB) error { return nil }); err != nil {
				t.Fatalf("round %d: a branch on the table: %v", round, err)
			}
		}
	})
}

// TestGormCreateTableBesideAnOpenBranch runs CreateTable, as every process does at its start, on a
// barrier table that exists while another process's branch transaction that wrote to it is open: it
// returns at once. On PostgreSQL its CREATE INDEX IF NOT EXISTS asked for a SHARE lock on the table
// even when the index existed, so it waited behind that transaction — and every later branch's insert
// queued behind it, stalling all the branches of every service on the table.
func TestGormCreateTableBesideAnOpenBranch(t *testing.T) {
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		if db.Dialector.Name() == "sqlite" {
			t.Skip("one file, one writer")
		}
		g := newGormTable(t, db)
		tx := db.Begin()
		if tx.Error != nil {
			t.Fatal(tx.Error)
		}
		defer tx.Rollback()
		b, _ := NewBranch(TransTCC, testsvc.Name("gid-"), "01", OpTry)
		if out, err := g.Enter(context.Background(), tx, b); err != nil || out != Proceed {
			t.Fatalf("Enter = %v, %v", out, err)
		}
		// Generous: it only tells a CreateTable that returns from one that waits for the open branch.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		again, err := NewGorm(db, &GormOptions{Table: g.Table()})
		if err != nil {
			t.Fatal(err)
		}
		if err := again.CreateTable(ctx); err != nil {
			t.Fatalf("CreateTable beside an open branch transaction: %v", err)
		}
	})
}

// TestGormCreateTableIndexLookupFails: on PostgreSQL CreateTable looks its index up before creating
// it. On a gorm.DB in PrepareStmt mode, gorm's prepared pool answers a QueryRowContext whose prepare
// failed (the context ended, the connection broke) with an empty sql.Row, whose Scan panics: a
// process starting with a deadline crashed instead of getting CreateTable's error. The lookup's
// failure must come back as an error.
func TestGormCreateTableIndexLookupFails(t *testing.T) {
	db := testsvc.Postgres(t, &gorm.Config{Logger: logger.Discard, PrepareStmt: true})
	table := freshTableName(t, db)
	g, err := NewGorm(db, &GormOptions{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The context ends once the table is created: the index lookup comes next.
	if err := db.Callback().Raw().After("gorm:raw").Register("test:cancel_after_create_table", func(tx *gorm.DB) {
		if strings.HasPrefix(tx.Statement.SQL.String(), "CREATE TABLE") {
			cancel()
		}
	}); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("CreateTable panicked when its index lookup failed: %v", p)
			}
		}()
		if err := g.CreateTable(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("CreateTable with its context ended before the index lookup: %v, want context.Canceled", err)
		}
	}()
	if err := db.Callback().Raw().Remove("test:cancel_after_create_table"); err != nil {
		t.Fatal(err)
	}
	if err := g.CreateTable(context.Background()); err != nil {
		t.Fatalf("CreateTable again: %v", err)
	}
}
