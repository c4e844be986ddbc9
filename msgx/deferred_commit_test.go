package msgx_test

import (
	"context"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
)

// TestTxCommitRefusedByADeferredConstraintGivesUp: on PostgreSQL a handler's write that breaks a
// deferred constraint (DEFERRABLE INITIALLY DEFERRED) fails at COMMIT, after the handler returned nil.
// That refusal — nothing committed, and every delivery fails the same way — was answered as a store
// outage whose outcome is unknown: Failed, never counted against Options.MaxAttempts, so the message
// was redelivered forever (found by a defect hunt). It is the handler's failure now: retried, and
// given up (dead-lettered) at MaxAttempts, with nothing applied.
func TestTxCommitRefusedByADeferredConstraintGivesUp(t *testing.T) {
	f := newTx(t, testsvc.Postgres(t, nil), nil, &msgx.Options{MaxAttempts: 2})
	uniq := testsvc.Name("t_uniq_")
	testsvc.DropTable(t, f.db, uniq)
	if err := f.db.Exec("CREATE TABLE " + uniq + " (k TEXT UNIQUE DEFERRABLE INITIALLY DEFERRED)").Error; err != nil {
		t.Fatal(err)
	}
	if err := f.db.Exec("INSERT INTO " + uniq + " VALUES ('taken')").Error; err != nil {
		t.Fatal(err)
	}
	h := f.mg.Tx(f.db, f.records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
		if err := tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 10).Error; err != nil {
			return err
		}
		return tx.Exec("INSERT INTO " + uniq + " VALUES ('taken')").Error // refused at COMMIT
	})
	ctx := context.Background()
	m := msg("dc1")
	want(t, h(ctx, m), msgx.Retry, msgx.Failed)
	m.Attempt = 2
	want(t, h(ctx, m), msgx.DeadLetter, msgx.GaveUp)
	if n, s := f.effectsOf(t, "dc1"), f.status(t, "dc1"); n != 0 || s != "" {
		t.Fatalf("%d effects, record %q; want none of either", n, s)
	}
}
