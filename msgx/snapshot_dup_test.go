package msgx_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
)

// TestTxDuplicatesUnderSnapshotIsolation: concurrent deliveries of one message in Tx mode without a
// Locker, on PostgreSQL under SERIALIZABLE and REPEATABLE READ (the record's INSERT meets a record
// committed after the transaction's snapshot), take effect once; the others end Duplicate.
func TestTxDuplicatesUnderSnapshotIsolation(t *testing.T) {
	for _, iso := range []string{"serializable", `repeatable\\ read`} {
		t.Run(iso, func(t *testing.T) {
			db := testsvc.PostgresWith(t, nil, " options='-c default_transaction_isolation="+iso+"'")
			f := newTx(t, db, nil, &msgx.Options{RetryDelay: 10 * time.Millisecond, MaxAttempts: 5})
			var lvl string
			if err := db.Raw("SHOW default_transaction_isolation").Row().Scan(&lvl); err != nil || lvl == "read committed" {
				t.Fatalf("isolation %q, %v", lvl, err)
			}
			h := f.mg.Tx(f.db, f.records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
				if err := tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 10).Error; err != nil {
					return err
				}
				time.Sleep(30 * time.Millisecond)
				return nil
			})
			const ids, copies = 4, 4
			var mu sync.Mutex
			first := map[string]int{}
			var wg sync.WaitGroup
			for i := range ids * copies {
				wg.Go(func() {
					m := msg(fmt.Sprintf("s%d", i%ids))
					for attempt := 1; attempt < 20; attempt++ {
						m.Attempt = attempt
						d := h(context.Background(), m)
						mu.Lock()
						first[fmt.Sprintf("a%d:%v", attempt, d.Outcome)]++
						mu.Unlock()
						if d.Action != msgx.Retry {
							if d.Outcome != msgx.Processed && d.Outcome != msgx.Duplicate {
								t.Errorf("%s: %v", m.ID, d)
							}
							return
						}
						time.Sleep(d.Delay)
					}
				})
			}
			wg.Wait()
			for i := range ids {
				if n := f.effectsOf(t, fmt.Sprintf("s%d", i)); n != 1 {
					t.Errorf("s%d: %d effects", i, n)
				}
			}
			t.Logf("outcomes %v", first)
		})
	}
}
