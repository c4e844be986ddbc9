package natsjs_test

import (
	"context"
	"encoding/json"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
	"github.com/idemkit/idemkit/record"
)

// A payment consumer: each payment credits an account exactly once, however often it is published
// or delivered. Run the complete program with go run ./examples/nats-consumer.
func Example() {
	ctx := context.Background()
	db, err := gorm.Open(mysql.Open("root:@tcp(127.0.0.1:3306)/shop"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	records, err := record.New(db, nil) // table idemkit_records, in the same database as accounts
	if err != nil {
		log.Fatal(err)
	}
	if err := records.CreateTable(ctx); err != nil { // at start-up: creates the table if it is missing
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	guard, err := idemkit.New(records, &idemkit.Options{Locker: lock.New(rdb, nil), FailOpen: true})
	if err != nil {
		log.Fatal(err)
	}
	mg, err := msgx.New(guard, nil) // key: the Nats-Msg-Id; scope: "<stream>/<consumer>"
	if err != nil {
		log.Fatal(err)
	}
	// Tx mode: the credit and the message's record commit together; the ack follows the commit.
	handle := mg.Tx(db, records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
		var p struct{ Account, Amount int64 }
		if err := json.Unmarshal(m.Data, &p); err != nil {
			return idemkit.Permanent(err) // REJECTED and dead-lettered, never retried
		}
		return tx.Exec("UPDATE accounts SET balance = balance + ? WHERE id = ?", p.Amount, p.Account).Error
	})

	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "PAYMENTS", jetstream.ConsumerConfig{
		Durable: "ledger", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute,
	})
	if err != nil {
		log.Fatal(err)
	}
	err = natsjs.Consume(ctx, js, cons, handle, &natsjs.Options{Workers: 8, DeadLetterSubject: "PAYMENTS_DLQ.ledger"})
	if err != nil {
		log.Fatal(err)
	}
}
