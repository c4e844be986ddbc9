package record

import (
	"context"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
)

// TestTxRawTransactionEndIsRefused: a function guarded by Store.Tx that ends the Guard's transaction
// with raw SQL (tx.Exec("ROLLBACK")) had its writes rolled back and its record then committed on its
// own: a success answered and replayed without its effect (found by a defect hunt). Such statements
// are refused as tx.Rollback() is; a savepoint's ROLLBACK TO still runs.
func TestTxRawTransactionEndIsRefused(t *testing.T) {
	eachTxBackend(t, func(t *testing.T, b backend) {
		f := newTxFixture(t, b, nil)
		for _, end := range []string{"ROLLBACK", " rollback work;", "COMMIT", "START TRANSACTION"} {
			key := "raw" + end
			_, err := f.store.Tx(ctxb, f.guard, idemkit.Call{Scope: "raw", Key: key}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
				if err := tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, 1)", key).Error; err != nil {
					return nil, err
				}
				if err := tx.Exec(end).Error; err == nil {
					t.Errorf("%q ran", end)
				}
				if err := tx.Exec("SAVEPOINT sp1").Error; err != nil {
					return nil, err
				}
				if err := tx.Exec("ROLLBACK TO SAVEPOINT sp1").Error; err != nil {
					return nil, err
				}
				return []byte("ok"), nil
			})
			var n int
			must(t, f.db.Raw("SELECT count(*) FROM "+f.biz+" WHERE k = ?", key).Row().Scan(&n))
			if endsTx("BEGIN NOT ATOMIC SELECT 1; END") || endsTx("ROLLBACK TO sp1") || endsTx("ROLLBACK WORK TO SAVEPOINT sp1") || endsTx("rollbacks") {
				t.Error("a statement that does not end the transaction is taken for one")
			}
			if err != nil || n != 1 {
				t.Errorf("%q: call error %v, %d business rows; want success with its row", end, err, n)
			}
		}
	})
}
