package record_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/record"
)

func Example() {
	dir, err := os.MkdirTemp("", "idemkit-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := gorm.Open(sqlite.Open(filepath.Join(dir, "app.db")), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}

	ctx := context.Background()
	store, err := record.New(db, nil) // table idemkit_records
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTable(ctx); err != nil {
		log.Fatal(err)
	}
	guard, err := idemkit.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}

	call := idemkit.Call{Scope: "POST /payments", Key: "client-key-1"}
	for range 2 {
		res, err := guard.Do(ctx, call, func(ctx context.Context) ([]byte, error) {
			fmt.Println("charging the card")
			return []byte("payment 42"), nil
		})
		fmt.Printf("%s replayed=%v err=%v\n", res.Value, res.Replayed, err)
	}
	// Output:
	// charging the card
	// payment 42 replayed=false err=<nil>
	// payment 42 replayed=true err=<nil>
}

// Tx mode in the caller's own transaction (DoTx): the record commits or rolls back with the
// business's writes. The contract: return DoTx's error from the transaction function, so that every
// error rolls back — including ErrRollbackReplayed, which DoTx returns with the stored answer when the
// function ran for a key another attempt had finished.
func ExampleStore_WithTx() {
	dir, err := os.MkdirTemp("", "idemkit-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := gorm.Open(sqlite.Open(filepath.Join(dir, "app.db")), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	ctx := context.Background()
	store, err := record.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTable(ctx); err != nil {
		log.Fatal(err)
	}
	if err := db.Exec("CREATE TABLE orders (id TEXT PRIMARY KEY, amount INTEGER)").Error; err != nil {
		log.Fatal(err)
	}
	guard, err := idemkit.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}

	place := func() (idemkit.Result, error) {
		var res idemkit.Result
		err := db.Transaction(func(tx *gorm.DB) error {
			var err error
			res, err = guard.DoTx(ctx, store.WithTx(tx), idemkit.Call{Scope: "orders", Key: "order-7"},
				func(ctx context.Context) ([]byte, error) {
					return []byte("order-7"), tx.Exec("INSERT INTO orders (id, amount) VALUES (?, ?)", "order-7", 100).Error
				})
			return err // every error rolls back the order and the record together
		})
		if errors.Is(err, idemkit.ErrRollbackReplayed) && !errors.Is(err, idemkit.ErrRejected) {
			err = nil // rolled back; res holds the result another attempt stored (a stored rejection stays an error)
		}
		return res, err
	}
	for range 2 {
		res, err := place()
		fmt.Printf("%s replayed=%v err=%v\n", res.Value, res.Replayed, err)
	}
	var n int64
	db.Table("orders").Count(&n)
	fmt.Println("orders:", n)
	// Output:
	// order-7 replayed=false err=<nil>
	// order-7 replayed=true err=<nil>
	// orders: 1
}

// Tx mode with the transaction owned by the Guard: it begins, runs the business, writes the record once
// beside the business's writes and commits — or rolls back and replays a stored answer. Nothing for the
// caller to get wrong.
func ExampleStore_Tx() {
	dir, err := os.MkdirTemp("", "idemkit-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := gorm.Open(sqlite.Open(filepath.Join(dir, "app.db")), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	ctx := context.Background()
	store, err := record.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTable(ctx); err != nil {
		log.Fatal(err)
	}
	if err := db.Exec("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER)").Error; err != nil {
		log.Fatal(err)
	}
	if err := db.Exec("INSERT INTO accounts (id, balance) VALUES (1, 100)").Error; err != nil {
		log.Fatal(err)
	}
	guard, err := idemkit.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}

	debit := func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
		var balance int
		if err := tx.Raw("SELECT balance FROM accounts WHERE id = 1").Scan(&balance).Error; err != nil {
			return nil, err
		}
		if balance < 100 {
			return nil, idemkit.Permanent(errors.New("insufficient funds"))
		}
		if err := tx.Exec("UPDATE accounts SET balance = balance - 100 WHERE id = 1").Error; err != nil {
			return nil, err
		}
		return []byte("debited 100"), nil
	}
	call := idemkit.Call{Scope: "POST /debits", Key: "debit-9"}
	for range 2 {
		res, err := store.Tx(ctx, guard, call, debit)
		fmt.Printf("%s replayed=%v err=%v\n", res.Value, res.Replayed, err)
	}
	var balance int
	db.Raw("SELECT balance FROM accounts WHERE id = 1").Scan(&balance)
	fmt.Println("balance:", balance)
	// Output:
	// debited 100 replayed=false err=<nil>
	// debited 100 replayed=true err=<nil>
	// balance: 0
}
