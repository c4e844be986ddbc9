package msgx_test

import (
	"context"
	"fmt"
	"log"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/msgx"
)

// Execute mode: a handler whose effect is outside the record's database runs once per message id;
// a redelivery is acknowledged without running, a message without an id is dead-lettered.
func ExampleGuard_Execute() {
	guard, err := idemkit.New(memory.NewStore(), nil) // record.New(db, nil) in production
	if err != nil {
		log.Fatal(err)
	}
	mg, err := msgx.New(guard, nil)
	if err != nil {
		log.Fatal(err)
	}
	handle := mg.Execute(func(ctx context.Context, m *msgx.Message) error {
		fmt.Println("sending the receipt for", m.ID)
		return nil
	})
	ctx := context.Background()
	m := &msgx.Message{ID: "order-42", Queue: "receipts", Attempt: 1}
	fmt.Println(handle(ctx, m))
	fmt.Println(handle(ctx, m)) // the broker delivers it again
	fmt.Println(handle(ctx, &msgx.Message{Queue: "receipts", Attempt: 1}))
	// Output:
	// sending the receipt for order-42
	// ack (processed)
	// ack (duplicate)
	// dead-letter (poison: msgx: message has no idempotency key)
}
