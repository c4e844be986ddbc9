package amqp_test

import (
	"context"
	"encoding/json"
	"log"
	"os"
	"os/signal"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/amqp"
	"github.com/idemkit/idemkit/record"
)

// A payment consumer on RabbitMQ: each payment credits an account exactly once, however often it
// is published or delivered; rejected and malformed messages go to payments.dlq. Run the complete
// program with go run ./examples/amqp-consumer.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	db, err := gorm.Open(mysql.Open("root:@tcp(127.0.0.1:3306)/shop"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	records, err := record.New(db, nil)
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
	mg, err := msgx.New(guard, nil) // key: the message-id property; scope: the queue
	if err != nil {
		log.Fatal(err)
	}
	handle := mg.Tx(db, records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
		var p struct{ Account, Amount int64 }
		if err := json.Unmarshal(m.Data, &p); err != nil {
			return idemkit.Permanent(err) // REJECTED and dead-lettered, never retried
		}
		return tx.Exec("UPDATE accounts SET balance = balance + ? WHERE id = ?", p.Amount, p.Account).Error
	})

	conn, err := amqp091.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	defer ch.Close()
	// A quorum queue counts deliveries: msgx's backoff grows and MaxAttempts works (see the package doc).
	topo, err := amqp.Declare(ch, "payments", amqp091.Table{"x-queue-type": "quorum"}) // payments, with payments.dlx → payments.dlq
	if err != nil {
		log.Fatal(err)
	}
	if err := amqp.Consume(ctx, ch, topo.Queue, handle, &amqp.Options{Workers: 8}); err != nil {
		log.Fatal(err)
	}
}
