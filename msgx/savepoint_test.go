package msgx_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/msgx"
)

// TestTxHandlerSavepoint: a Tx-mode handler's nested db.Transaction is a savepoint of the Guard's
// transaction: its failure rolls back only its own writes, the handler's others commit with the
// record, once; a redelivery is a Duplicate.
func TestTxHandlerSavepoint(t *testing.T) {
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			f := newTx(t, open(), nil, nil)
			h := f.mg.Tx(f.db, f.records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
				if err := tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 10).Error; err != nil {
					return err
				}
				inner := tx.Transaction(func(tx *gorm.DB) error {
					if err := tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 20).Error; err != nil {
						return err
					}
					return errBoom
				})
				if !errors.Is(inner, errBoom) {
					return inner
				}
				return nil
			})
			ctx := context.Background()
			want(t, h(ctx, msg("sp1")), msgx.Ack, msgx.Processed)
			want(t, h(ctx, msg("sp1")), msgx.Ack, msgx.Duplicate)
			var n, sum int
			if err := f.db.Raw("SELECT count(*), coalesce(sum(amount), 0) FROM "+f.effects+" WHERE msg_id = ?", "sp1").Row().Scan(&n, &sum); err != nil {
				t.Fatal(err)
			}
			if n != 1 || sum != 10 {
				t.Fatalf("%d effects summing %d, want the outer one only (1, 10)", n, sum)
			}
		})
	}
}
