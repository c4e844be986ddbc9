// Package amqp runs an idempotent message handler (package msgx) on a RabbitMQ queue with manual
// acknowledgements (github.com/rabbitmq/amqp091-go).
//
//	topo, err := amqp.Declare(ch, "orders", nil) // orders, orders.dlx → orders.dlq
//	err = amqp.Consume(ctx, ch, topo.Queue, handle, &amqp.Options{Workers: 4})
//
// Each delivery becomes a msgx.Message: ID is the message-id property, Queue the queue, Subject the
// routing key, Redelivered the broker's flag, Attempt the x-delivery-count header of quorum queues plus
// one (else 2 when redelivered, 1 otherwise). Decisions are settled as
//
//	msgx.Ack         basic.ack (after the outcome is durable)
//	msgx.Retry       the delivery is held unacknowledged for the delay, then basic.nack with requeue:
//	                 RabbitMQ has no delayed requeue, so a waiting delivery occupies a prefetch slot;
//	                 when Consume stops, waiting deliveries are requeued at once
//	msgx.DeadLetter  basic.nack without requeue: the queue's dead-letter exchange
//	                 (x-dead-letter-exchange) routes it, with RabbitMQ's x-death header saying where it
//	                 came from; the reason is in the log and, for Rejected, in the REJECTED record
//
// The redelivered flag only says that the broker delivered this copy before (a consumer died or
// requeued it); a message published twice arrives twice with the flag unset. So the guard checks every
// delivery, flagged or not. RabbitMQ has no publish-side deduplication: publishers that retry publish
// duplicates, which the guard acknowledges without running.
//
// A queue without a dead-letter exchange drops what is dead-lettered; [Declare] sets one up. Publish
// persistent messages with publisher confirms for them to survive a broker restart.
package amqp
