package amqp_test

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
)

// TestDeclareQuorumDeadLettersAtLeastOnce: a quorum queue from Declare dead-lettered at most once,
// RabbitMQ's default: a dead letter its exchange could not deliver (the dead-letter queue unavailable,
// full, or unbound) was dropped, against "dead letters are at least once". Declare asks for RabbitMQ's
// at-least-once dead-lettering (x-dead-letter-strategy at-least-once, which needs x-overflow
// reject-publish). RabbitMQ checks both arguments when a queue is declared again: a declaration
// carrying them is refused (PRECONDITION_FAILED) unless the queue has them.
func TestDeclareQuorumDeadLettersAtLeastOnce(t *testing.T) {
	f := setup(t, nil, amqp091.Table{"x-queue-type": "quorum"})
	ch := testbroker.Channel(t, f.conn)
	_, err := ch.QueueDeclare(f.topo.Queue, true, false, false, false, amqp091.Table{
		"x-queue-type":           "quorum",
		"x-dead-letter-exchange": f.topo.DeadLetterExchange,
		"x-dead-letter-strategy": "at-least-once",
		"x-overflow":             "reject-publish",
	})
	if err != nil {
		t.Fatalf("the quorum queue Declare made does not dead-letter at least once: %v", err)
	}
}
