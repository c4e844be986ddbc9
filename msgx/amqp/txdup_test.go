package amqp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/amqp"
)

// TestTxConcurrentCopiesOnTwoConsumers: copies of one message published several times to a quorum
// queue, consumed by two consumers in Tx mode on MariaDB without a Locker (both may run the handler at
// once): exactly one effect; every other copy is acknowledged Duplicate, replayed from the record
// (after a Failed retry when InnoDB picked it as a deadlock victim).
func TestTxConcurrentCopiesOnTwoConsumers(t *testing.T) {
	f := setup(t, &msgx.Options{RetryDelay: 10 * time.Millisecond}, amqp091.Table{"x-queue-type": "quorum"})
	db := testsvc.MySQL(t, nil)
	records, effects := testbroker.TxTables(t, db)
	var err error
	if f.guard, err = idemkit.New(records, nil); err != nil {
		t.Fatal(err)
	}
	if f.mg, err = msgx.New(f.guard, &msgx.Options{RetryDelay: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	h := f.mg.Tx(db, records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
		if err := tx.Exec("INSERT INTO "+effects+" (msg_id) VALUES (?)", m.ID).Error; err != nil {
			return err
		}
		time.Sleep(30 * time.Millisecond) // the other consumer's copy arrives meanwhile
		return nil
	})
	const ids, copies = 3, 4
	for range copies {
		for i := range ids {
			f.publish(t, fmt.Sprintf("d%d", i), "")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	for range 2 {
		ch := testbroker.Channel(t, f.conn)
		go func() {
			done <- amqp.Consume(ctx, ch, f.topo.Queue, h, &amqp.Options{Workers: 2,
				Observe: func(m *msgx.Message, d msgx.Decision) { f.decided <- decided{m, d} }})
		}()
	}
	final := map[msgx.Outcome]int{}
	retries := map[msgx.Outcome]int{}
	timeout := time.After(30 * time.Second)
	for final[msgx.Processed]+final[msgx.Duplicate] < ids*copies {
		select {
		case d := <-f.decided:
			if d.d.Action == msgx.Ack {
				final[d.d.Outcome]++
				if d.d.Outcome == msgx.Duplicate && !d.d.Replayed {
					t.Errorf("duplicate %v not replayed", d.d)
				}
			} else if d.d.Action == msgx.Retry {
				retries[d.d.Outcome]++
			} else {
				t.Fatalf("decision %v", d.d)
			}
		case <-timeout:
			t.Fatalf("final %v, retries %v: not all settled", final, retries)
		}
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if final[msgx.Processed] != ids || final[msgx.Duplicate] != ids*(copies-1) {
		t.Fatalf("final %v, want %d processed and %d duplicates", final, ids, ids*(copies-1))
	}
	for i := range ids {
		var n int
		if err := db.Raw("SELECT count(*) FROM "+effects+" WHERE msg_id = ?", fmt.Sprintf("d%d", i)).Row().Scan(&n); err != nil || n != 1 {
			t.Fatalf("d%d: %d effects (%v), want 1", i, n, err)
		}
	}
	t.Logf("final %v, retries %v", final, retries)
}
