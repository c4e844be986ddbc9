package record_test

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/record"
)

// debit runs one guarded debit in Tx mode and runs the whole transaction again when the database
// rolled it back on a write conflict: an InnoDB deadlock, or on a Galera cluster a certification
// failure, which a node reports at COMMIT (or at the next statement of a transaction a replicated
// write aborted). Nothing of a rolled-back attempt happened, and the next attempt of a key another
// writer won gets that writer's result replayed. When the debit ran but another attempt's record was
// there first, DoTx returns that stored answer with ErrRollbackReplayed: the transaction rolled back,
// and the stored answer is the answer (a stored rejection comes as the error).
func debit(ctx context.Context, db *gorm.DB, store *record.Store, guard *idemkit.Guard, key string) ([]byte, error) {
	const attempts = 5
	for attempt := 1; ; attempt++ {
		var res idemkit.Result
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var err error
			res, err = guard.DoTx(ctx, store.WithTx(tx), idemkit.Call{Scope: "debit", Key: key},
				func(ctx context.Context) ([]byte, error) {
					r := tx.WithContext(ctx).Exec("UPDATE accounts SET balance = balance - 10 WHERE id = 1 AND balance >= 10")
					if r.Error == nil && r.RowsAffected == 0 {
						return nil, idemkit.Permanent(errors.New("insufficient balance"))
					}
					return []byte("debited 10"), r.Error
				})
			return err
		})
		switch {
		case err == nil:
			return res.Value, nil
		case errors.Is(err, idemkit.ErrRollbackReplayed) && !errors.Is(err, idemkit.ErrRejected):
			return res.Value, nil // rolled back: the answer another attempt stored
		case record.IsConflict(err) && attempt < attempts:
			continue
		default:
			return nil, fmt.Errorf("debit %s: %w", key, err)
		}
	}
}

// ExampleIsConflict shows the retry loop a caller who owns its transaction needs on a database that
// can roll it back on a conflict (see debit).
func ExampleIsConflict() {
	var (
		db    *gorm.DB       // the business database, e.g. a Galera node
		store *record.Store  // record.New(db, nil)
		guard *idemkit.Guard // idemkit.New(store, nil)
	)
	if db == nil {
		return // a sketch: open the database, the Store and the Guard first
	}
	v, err := debit(context.Background(), db, store, guard, "client-key-1")
	fmt.Println(string(v), err)
}
