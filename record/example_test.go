package record_test

import (
	"context"
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

// Tx mode: the record commits or rolls back with the business's own writes.
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
			return err // an error rolls back the order and the record together
		})
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
