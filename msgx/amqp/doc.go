// Package amqp runs an idempotent message handler (package msgx) on a RabbitMQ queue with manual
// acknowledgements (github.com/rabbitmq/amqp091-go).
//
//	topo, err := amqp.Declare(ch, "orders", amqp091.Table{"x-queue-type": "quorum"}) // orders, orders.dlx → orders.dlq
//	err = amqp.Consume(ctx, ch, topo.Queue, handle, &amqp.Options{Workers: 4})
//
// Each delivery becomes a msgx.Message: ID is the message-id property, Queue the queue, Subject the
// routing key, Redelivered the broker's flag, Attempt 1 on a delivery not flagged redelivered
// (whatever count headers the message was published with), else the x-delivery-count header of
// quorum queues plus one (x-acquired-count plus one when larger: RabbitMQ 4.3 counts only failed
// deliveries in x-delivery-count), or 2 without them, with AttemptsUncounted. Decisions are settled
// as
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
// # Queue types
//
// Use quorum queues ("x-queue-type": "quorum" in [Declare]'s args). They count deliveries, so
// Attempt is exact, retry delays grow from msgx.Options.RetryDelay to MaxRetryDelay and any
// msgx.Options.MaxAttempts works. Classic queues keep no count: every redelivery is Attempt 2. There,
// a retry after a redelivery waits MaxRetryDelay (the backoff cannot grow), MaxAttempts 0 (no limit),
// 1 and 2 work, and a larger MaxAttempts — which could never be reached — is refused at the queue's
// first redelivery: the delivery is requeued and Consume returns an error wrapping
// msgx.ErrMisconfigured. (RabbitMQ reports the count only on redeliveries, so the queue type cannot be
// told before one.) A quorum queue's own x-delivery-limit, if set, drops or dead-letters a message
// past it: keep MaxAttempts below it, with room for the redeliveries of a key held by another
// delivery (InFlight: a concurrent copy, or a consumer that crashed holding it until its lease runs
// out), which RabbitMQ counts too.
//
// # Stopping
//
// Ending Consume's context cancels the consumer and waits for the broker's confirmation, the running
// handlers and the requeue of deliveries waiting out a retry delay. A broker that stopped answering
// never confirms: after Options.CancelTimeout (DefaultCancelTimeout, 2s) Consume gives up waiting and
// returns [ErrCancelUnconfirmed]. Nothing is acknowledged that was not handled, and nothing is lost:
// what the broker did not see acknowledged it requeues when the connection ends. Close that connection
// with a deadline (amqp091's Connection.CloseDeadline): Channel.Close and Connection.Close wait for the
// broker's answer too, until amqp091 gives the connection up (15 s with its default heartbeat).
//
// A queue without a dead-letter exchange drops what is dead-lettered; [Declare] sets one up, and
// declares a quorum queue with at-least-once dead-lettering (x-dead-letter-strategy at-least-once,
// x-overflow reject-publish): a dead letter stays in the queue until the dead-letter queue has it. A
// classic queue dead-letters at most once (RabbitMQ's only way for it): a dead letter the dead-letter
// queue cannot take at that moment is lost. Publish persistent messages with publisher confirms for
// them to survive a broker restart.
package amqp
