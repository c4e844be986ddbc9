// Package natsjs runs an idempotent message handler (package msgx) on a NATS JetStream pull consumer
// (github.com/nats-io/nats.go/jetstream).
//
//	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
//		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
//	})
//	err = natsjs.Consume(ctx, js, cons, handle, &natsjs.Options{Workers: 4, DeadLetterSubject: "ORDERS_DLQ.billing"})
//
// Each message becomes a msgx.Message: ID is the Nats-Msg-Id header, Queue "<stream>/<consumer>",
// Attempt the server's delivery count. Decisions are settled as
//
//	msgx.Ack         Ack (after the outcome is durable)
//	msgx.Retry       NakWithDelay(delay): the server redelivers after the delay
//	msgx.DeadLetter  a copy published to Options.DeadLetterSubject (awaiting the stream's ack), then
//	                 Term; without a dead-letter subject only Term (an advisory reports it). A copy
//	                 that cannot be published: NakWithDelay(delay), the attempt's backoff; on the
//	                 consumer's last delivery (MaxDeliver), held (InProgress) and published again
//	                 until it lands or Consume stops
//
// The copy keeps the data and headers, with the original's Nats-* headers renamed Idemkit-Orig-*
// (Nats-Msg-Id becomes Idemkit-Orig-Msg-Id): JetStream would act on them when the copy is published
// (a Nats-Expected-Stream made the dead-letter stream refuse it), and a key nats.go refuses to
// publish (another client's "trace/id") with those bytes percent-encoded ("trace%2Fid"). Its own Nats-Msg-Id names the
// dead-lettering — consumer, stream sequence, stored time, outcome — so that the dead-letter stream
// deduplicates a publish repeated after a lost ack and nothing else; a duplicate ack is taken for the
// stored dead letter only when the message under that id is the same dead-lettering. A dead letter
// published back to its consumer as it is (a replay) is keyed by its Idemkit-Orig-Msg-Id: see Message.
//
// The consumer must use AckPolicy explicit; its AckWait must exceed the handler's longest run plus the
// time a message waits in the client's buffer (Options.MaxMessages), or the server redelivers it while
// it is still running (harmless: the guard answers InFlight or Duplicate, but it costs work).
// MaxDeliver, if set, is the server's own limit: a message Nak'ed on its last delivery is dropped by
// the server with a MAX_DELIVERIES advisory. Consume reads it from the consumer's info, and a delivery
// that would be retried on it (Failed, whatever msgx.Options.MaxAttempts says, or InFlight: an
// earlier delivery run past AckWait may hold the key, and its own retry would be dropped) gives up
// instead: GaveUp, dead-lettered (a dead letter whose holder succeeded replays as a Duplicate); so
// does a message fetched on its last delivery and not handled when Consume stops. A process that dies
// during a last delivery (kill -9, OOM, a crash the message causes) settles nothing: once AckWait runs
// out the server stops delivering the message, keeps it in the stream and publishes a MAX_DELIVERIES
// advisory ($JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>). Consume subscribes to it
// and settles the message from the stream as its last delivery would have, without running it:
// dead-lettered GaveUp — or, with Options.Records (the msgx.Guard), as its record says: not at all when
// it took effect, Rejected when it was rejected — once however many consumer processes got the
// advisory, and removed from a work-queue stream. The advisory is stored nowhere: one that reaches no
// running Consume (lost with a connection, published after another client's pull) leaves the message
// dropped, no effect and no dead letter. To lose nothing even then, leave MaxDeliver unlimited and set
// msgx.Options.MaxAttempts (a message that kills every consumer is then redelivered until removed).
//
// # Nats-Msg-Id and idemkit
//
// JetStream deduplicates on publish: a message whose Nats-Msg-Id the stream has seen within its
// duplicate window (StreamConfig.Duplicates, 2 minutes by default, at least 100ms) is acknowledged to
// the publisher and not stored. That catches a publisher retrying right after a timeout, and nothing
// else: a publisher that retries after the window, or republishes from an outbox after a restart, gets
// a second copy stored; and the consumer side redelivers on its own (a missed ack, AckWait, a Nak, a
// consumer that died after its work and before its ack). idemkit's record covers all of these, for
// its TTL (24 hours by default) rather than minutes, and on the consumer's side of the broker. Use
// both: the same id as Nats-Msg-Id and as the idemkit key (the default) lets the window drop quick
// retries before they cost a delivery, and the record catch the rest.
package natsjs
