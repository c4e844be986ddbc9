package msgx_test

import (
	"context"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
)

// TestTxHandlerCannotCommitTheGuardsTransaction: in msgx's Tx mode the handler got the raw gorm
// transaction, so its tx.Commit() committed the effect without the message's record; the delivery
// was retried and the redelivery applied the effect a second time (found by a defect hunt). The
// handler's session refuses Commit, as record.Store.Tx's does: its error is the handler's, the
// effect rolls back, and no delivery applies it.
func TestTxHandlerCannotCommitTheGuardsTransaction(t *testing.T) {
	f := newTx(t, testsvc.MySQL(t, nil), nil, nil)
	h := f.mg.Tx(f.db, f.records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
		if err := tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 10).Error; err != nil {
			return err
		}
		return tx.Commit().Error // a mistake the record package's Guard-owned transactions refuse
	})
	ctx := context.Background()
	first := h(ctx, msg("c1"))
	second := h(ctx, msg("c1"))
	if n := f.effectsOf(t, "c1"); n != 0 || first.Action != msgx.Retry || second.Action != msgx.Retry {
		t.Fatalf("decisions %v, then %v: %d effects of one message, want none and retries (the handler's Commit must be refused)", first, second, n)
	}
}
