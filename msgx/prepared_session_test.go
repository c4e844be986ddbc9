package msgx_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
)

// TestTxHandlerPrepareStmtSessionStaysInTx: the handler's session (record.Sealed) opened as a
// PrepareStmt session must still write in the Guard's transaction. gorm's Session{PrepareStmt: true}
// keeps the connection only when the ConnPool is a gorm.Tx (ConnPool + Commit/Rollback +
// StmtContext); guardedPool lacked StmtContext, so gorm swapped in a PreparedStmtDB over the *pool*:
// the write escaped the transaction, committed on its own, and survived the handler's failure (a
// retry then applied it again). Found by a review.
func TestTxHandlerPrepareStmtSessionStaysInTx(t *testing.T) {
	f := newTx(t, testsvc.MySQL(t, nil), nil, nil)
	h := f.mg.Tx(f.db, f.records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
		ps := tx.Session(&gorm.Session{PrepareStmt: true})
		if err := ps.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 10).Error; err != nil {
			return err
		}
		return errors.New("retryable failure after the write")
	})
	d := h(context.Background(), msg("p1"))
	if n := f.effectsOf(t, "p1"); n != 0 {
		t.Fatalf("decision %v; %d effects after the handler failed: the PrepareStmt session wrote outside the Guard's transaction", d, n)
	}
}
