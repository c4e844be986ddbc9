package amqp

import (
	"errors"
	"fmt"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Topology is a queue and where its dead letters go.
type Topology struct {
	Queue              string // the work queue
	DeadLetterExchange string // "<queue>.dlx", a fanout exchange named in the queue's x-dead-letter-exchange
	DeadLetterQueue    string // "<queue>.dlq", bound to DeadLetterExchange
}

// Declare declares, on ch, a durable queue named queue whose rejected messages go to a durable fanout
// exchange "<queue>.dlx" and from there to a durable queue "<queue>.dlq". args are further queue
// arguments ("x-queue-type": "quorum" is recommended: see Queue types in the package doc); an
// x-dead-letter-exchange in them is an error.
//
// A quorum queue is declared with at-least-once dead-lettering ("x-dead-letter-strategy":
// "at-least-once", and "x-overflow": "reject-publish", without which RabbitMQ falls back to at most
// once): a dead letter stays in the queue until the dead-letter queue has it, where RabbitMQ's default
// drops one it cannot deliver at once (the dead-letter queue unavailable or full). args may set either
// argument otherwise. A classic queue dead-letters at most once: RabbitMQ offers nothing else for it.
//
// Declaring again with the same arguments changes nothing; with different ones RabbitMQ closes the
// channel with PRECONDITION_FAILED — as for a quorum queue declared by a version of this package that
// did not set the two arguments above (see CHANGELOG.md).
func Declare(ch *amqp091.Channel, queue string, args amqp091.Table) (Topology, error) {
	if queue == "" {
		return Topology{}, errors.New("amqp: Declare needs a queue name")
	}
	if _, ok := args["x-dead-letter-exchange"]; ok {
		return Topology{}, errors.New("amqp: Declare sets x-dead-letter-exchange itself")
	}
	t := Topology{Queue: queue, DeadLetterExchange: queue + ".dlx", DeadLetterQueue: queue + ".dlq"}
	qargs := amqp091.Table{"x-dead-letter-exchange": t.DeadLetterExchange}
	if qt, _ := args["x-queue-type"].(string); qt == "quorum" {
		qargs["x-dead-letter-strategy"] = "at-least-once"
		qargs["x-overflow"] = "reject-publish"
	}
	for k, v := range args {
		qargs[k] = v
	}
	if err := ch.ExchangeDeclare(t.DeadLetterExchange, amqp091.ExchangeFanout, true, false, false, false, nil); err != nil {
		return Topology{}, fmt.Errorf("amqp: declaring exchange %s: %w", t.DeadLetterExchange, err)
	}
	if _, err := ch.QueueDeclare(t.DeadLetterQueue, true, false, false, false, nil); err != nil {
		return Topology{}, fmt.Errorf("amqp: declaring queue %s: %w", t.DeadLetterQueue, err)
	}
	if err := ch.QueueBind(t.DeadLetterQueue, "", t.DeadLetterExchange, false, nil); err != nil {
		return Topology{}, fmt.Errorf("amqp: binding %s to %s: %w", t.DeadLetterQueue, t.DeadLetterExchange, err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, qargs); err != nil {
		var aerr *amqp091.Error
		if errors.As(err, &aerr) && aerr.Code == amqp091.PreconditionFailed && qargs["x-dead-letter-strategy"] != nil {
			return Topology{}, fmt.Errorf("amqp: declaring queue %s: %w (a quorum queue declared by an earlier idemkit lacks "+
				"x-dead-letter-strategy and x-overflow: drain and delete it for Declare to create it anew, or keep declaring it yourself as it is "+
				"and give it at-least-once dead-lettering through a RabbitMQ policy; see CHANGELOG.md)", queue, err)
		}
		return Topology{}, fmt.Errorf("amqp: declaring queue %s: %w", queue, err)
	}
	return t, nil
}

// Delete deletes the queue, the dead-letter queue and the dead-letter exchange, messages included.
func (t Topology) Delete(ch *amqp091.Channel) error {
	var errs []error
	for _, q := range []string{t.Queue, t.DeadLetterQueue} {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			errs = append(errs, fmt.Errorf("deleting queue %s: %w", q, err))
		}
	}
	if err := ch.ExchangeDelete(t.DeadLetterExchange, false, false); err != nil {
		errs = append(errs, fmt.Errorf("deleting exchange %s: %w", t.DeadLetterExchange, err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("amqp: %w", err)
	}
	return nil
}
