package msgx_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
)

// TestTxSerializationFailureRetriesOnce: on PostgreSQL SERIALIZABLE two messages whose handlers read
// what the other writes (a write skew) cannot both commit: one fails with a serialization failure (at
// a statement or at COMMIT), nothing of it commits and the delivery is retried; its redelivery runs the
// handler once more and takes effect. Each message takes effect once.
func TestTxSerializationFailureRetriesOnce(t *testing.T) {
	db := testsvc.PostgresWith(t, nil, " options='-c default_transaction_isolation=serializable'")
	f := newTx(t, db, nil, &msgx.Options{MaxAttempts: 5, RetryDelay: 10 * time.Millisecond})
	var mu sync.Mutex
	runs := map[string]int{}
	both := make(chan struct{})
	var once sync.Once
	var arrived sync.WaitGroup
	arrived.Add(2)
	h := f.mg.Tx(f.db, f.records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
		mu.Lock()
		runs[m.ID]++
		first := runs[m.ID] == 1
		mu.Unlock()
		var n int
		if err := tx.Raw("SELECT count(*) FROM " + f.effects).Row().Scan(&n); err != nil {
			return err
		}
		if first {
			arrived.Done()
			once.Do(func() { go func() { arrived.Wait(); close(both) }() })
			<-both // both transactions have read before either writes
		}
		return tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, n).Error
	})
	var wg sync.WaitGroup
	decisions := make(chan []msgx.Decision, 2)
	for _, id := range []string{"w1", "w2"} {
		wg.Go(func() {
			var ds []msgx.Decision
			m := msg(id)
			for attempt := 1; attempt <= 5; attempt++ {
				m.Attempt = attempt
				d := h(context.Background(), m)
				ds = append(ds, d)
				if d.Action != msgx.Retry {
					break
				}
				time.Sleep(d.Delay)
			}
			decisions <- ds
		})
	}
	wg.Wait()
	close(decisions)
	retried := 0
	for ds := range decisions {
		last := ds[len(ds)-1]
		if last.Outcome != msgx.Processed {
			t.Fatalf("decisions %v, want the last processed", ds)
		}
		for _, d := range ds[:len(ds)-1] {
			if d.Outcome != msgx.Failed {
				t.Fatalf("decisions %v: a retry that is not Failed", ds)
			}
		}
		retried += len(ds) - 1
		t.Logf("decisions %v", ds)
	}
	if retried != 1 {
		t.Fatalf("%d retries in all, want 1 (one of the two transactions is a serialization failure's victim)", retried)
	}
	for _, id := range []string{"w1", "w2"} {
		if n := f.effectsOf(t, id); n != 1 {
			t.Fatalf("%s: %d effects, want 1", id, n)
		}
	}
	if runs["w1"]+runs["w2"] != 3 {
		t.Fatalf("runs %v, want 3 in all (the victim's once more)", runs)
	}
}
