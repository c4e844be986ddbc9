package msgx_test

import (
	"context"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
)

// TestTxIgnoredFailedStatementGivesUpAtMaxAttempts: on PostgreSQL a handler that ignores a failed
// statement's error and returns nil leaves the message's record to fail with 25P02 (the transaction is
// aborted). Every delivery fails the same way, yet it was answered as a store outage — Failed, never
// counted against Options.MaxAttempts —, so the message was redelivered forever (found by a defect
// hunt). It is the handler's failure: retried, and given up (dead-lettered) at MaxAttempts, with
// nothing applied.
func TestTxIgnoredFailedStatementGivesUpAtMaxAttempts(t *testing.T) {
	f := newTx(t, testsvc.Postgres(t, nil), nil, &msgx.Options{MaxAttempts: 3})
	h := f.mg.Tx(f.db, f.records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
		if err := tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 10).Error; err != nil {
			return err
		}
		_ = tx.Exec("SELECT 1/0").Error // ignored: the handler's bug
		return nil
	})
	ctx := context.Background()
	m := msg("ab1")
	for attempt := 1; attempt <= 3; attempt++ {
		m.Attempt = attempt
		d := h(ctx, m)
		if attempt < 3 {
			want(t, d, msgx.Retry, msgx.Failed)
		} else {
			want(t, d, msgx.DeadLetter, msgx.GaveUp)
		}
		if d.Err == nil {
			t.Fatalf("attempt %d: decision %v without an error", attempt, d)
		}
	}
	if n, s := f.effectsOf(t, "ab1"), f.status(t, "ab1"); n != 0 || s != "" {
		t.Fatalf("%d effects, record %q; want none of either", n, s)
	}
}
