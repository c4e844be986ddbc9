package msgx_test

import (
	"context"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/msgx"
)

// TestTxHandlerRawTransactionEnd: a Tx-mode handler that ended the Guard's transaction with a raw
// statement, which the session's refusal of tx.Commit() and tx.Rollback() did not catch: after
// tx.Exec("ROLLBACK") the record committed on its own and the message was acknowledged without its
// effect; after tx.Exec("COMMIT") the effect committed apart from the record (found by a defect hunt).
// The handler's session refuses such statements as it refuses tx.Commit(): ignored, the handler's
// writes and the record commit together.
func TestTxHandlerRawTransactionEnd(t *testing.T) {
	for name, open := range databases(t) {
		for _, end := range []string{"ROLLBACK", "COMMIT", "commit work"} {
			t.Run(name+"/"+end, func(t *testing.T) {
				f := newTx(t, open(), nil, nil)
				h := f.mg.Tx(f.db, f.records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
					if err := tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 10).Error; err != nil {
						return err
					}
					_ = tx.Exec(end).Error
					return nil
				})
				d := h(context.Background(), msg("re1"))
				n, s := f.effectsOf(t, "re1"), f.status(t, "re1")
				if d.Action != msgx.Ack || d.Outcome != msgx.Processed || n != 1 || s != idemkit.StatusSucceeded {
					t.Fatalf("decision %v, %d effects, record %q; want processed, 1, SUCCEEDED", d, n, s)
				}
			})
		}
	}
}
