package amqp_test

import (
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
	"github.com/idemkit/idemkit/msgx/amqp"
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

// TestDeclareOldQuorumQueueNamesTheRemedy: a quorum queue declared by an earlier idemkit (without
// x-dead-letter-strategy and x-overflow) is refused by RabbitMQ when Declare declares it again with
// them; the error says why and what to do, rather than a bare PRECONDITION_FAILED.
func TestDeclareOldQuorumQueueNamesTheRemedy(t *testing.T) {
	conn := testbroker.AMQP(t)
	queue := testsvc.Name("msgx_old_")
	ch := testbroker.Channel(t, conn)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp091.Table{
		"x-queue-type": "quorum", "x-dead-letter-exchange": queue + ".dlx",
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_ = amqp.Topology{Queue: queue, DeadLetterExchange: queue + ".dlx", DeadLetterQueue: queue + ".dlq"}.Delete(ch)
			_ = ch.Close()
		}
	})
	_, err := amqp.Declare(testbroker.Channel(t, conn), queue, amqp091.Table{"x-queue-type": "quorum"})
	if err == nil || !strings.Contains(err.Error(), "policy") {
		t.Fatalf("Declare over an earlier quorum queue: %v; want an error naming the remedy", err)
	}
}
