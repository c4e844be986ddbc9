// Package msgx makes message consumers idempotent on an [idemkit.Guard], whatever the broker: a
// handler runs at most once per message key, its outcome is recorded before the message is
// acknowledged, and redeliveries and duplicate publishes are acknowledged without running again.
// The broker adapters msgx/natsjs (NATS JetStream pull consumers) and msgx/amqp (RabbitMQ) pull the
// messages and settle them by the [Decision] a [HandleFunc] returns.
//
//	mg, err := msgx.New(guard, nil) // key: the message id; scope: the queue
//	handle := mg.Tx(db, records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
//		return tx.Exec("UPDATE accounts SET balance = balance + ? WHERE id = ?", amount, id).Error
//	})
//	err = natsjs.Consume(ctx, js, consumer, handle, &natsjs.Options{Workers: 4})
//
// # Modes
//
// [Guard.Tx] is for handlers that write to the database holding the record table: the handler's
// writes and the record commit in one transaction the Guard owns ([idemkit.Guard.Tx]), then the
// message is acknowledged. A crash at any point leaves both or neither, so every message takes effect
// exactly once. The record costs one INSERT in the handler's transaction (written once, after the
// handler, with its final status) and, with a Redis Locker, two Redis commands per new message;
// without one, or when the cache cannot vouch for new keys, one read of the record before the
// transaction. [Guard.Execute] is for
// handlers whose effects are elsewhere (another database, an API, an email): the record is claimed and
// finished in commits of its own around the handler, so if the process dies after the effect and
// before the finish, the redelivery runs the handler again once the claim's lease (idemkit
// Options.Lease) has run out — make those effects idempotent themselves or fence them
// (idemkit.FenceFromContext).
//
// # What the broker is told
//
//	handler / record                          Outcome     Action                   record
//	returned nil                              Processed   Ack                      SUCCEEDED
//	key already SUCCEEDED (a duplicate)       Duplicate   Ack, handler not run     unchanged
//	Tx: key finished by another delivery      Duplicate   Ack, handler's writes    unchanged
//	  while the handler ran (Rejected when                rolled back
//	  that delivery's outcome was a rejection;
//	  also when its commit made this one's
//	  COMMIT fail on a write conflict: Galera)
//	idemkit.Permanent(err) / Guard classifier Rejected    DeadLetter (or Ack with  REJECTED
//	                                                      OnReject = AckRejected)
//	key already REJECTED                      Rejected    same as above, not run   unchanged
//	another delivery holds the key            InFlight    Retry after a delay      unchanged
//	retryable error, panic, cancellation;     Failed      Retry after backoff      FAILED (Execute) /
//	  Tx: a failed statement's error ignored                                       none (Tx: rolled back)
//	  (record.ErrTxAborted), a COMMIT
//	  refusing a deferred constraint
//	  ... at Attempt >= MaxAttempts            GaveUp      DeadLetter               as Failed
//	  (not when the delivery's context ended:
//	  the consumer stopping cut it short)
//	store or lock unavailable, claim taken    Failed      Retry after backoff      not recorded
//	  over (idemkit.ErrFenced), commit failed
//	  (Tx: a COMMIT refused on a write
//	  conflict no record answers); Tx: the
//	  handler returned a write conflict (a
//	  deadlock victim, a serialization failure)
//	no key, key invalid or too long           Poison      DeadLetter, not run      none
//	  (or Options.Key / Fingerprint panicked)
//	key reused with another payload           Poison      DeadLetter, not run      unchanged
//	  (Options.Fingerprint set)
//	queue unusable as the scope, MaxAttempts  Failed      Retry, not run; the      none
//	  above 2 on a queue without a delivery   (Err wraps  adapter stops consuming
//	  count (ErrMisconfigured)                ErrMisconfigured)
//
// A failure is Rejected or GaveUp only when the handler's error was recorded (REJECTED, FAILED): when
// the outcome's write fails — the store unavailable, a deadline on a hung database, the claim fenced
// — the delivery is Failed and retried, whatever the handler returned. A handler's own error that is
// recorded is its outcome, even when it wraps one of those errors (an inner guarded call's). In Tx
// mode a handler that returned nil after ignoring a failed statement's error (the database aborted or
// ended its transaction, so the record could not follow: record.ErrTxAborted), or whose writes a
// deferred constraint refused at COMMIT, failed itself: every delivery fails the same way, so it
// counts against Options.MaxAttempts like a retryable error. A write conflict the handler returned
// (record.IsConflict: its statement a deadlock's victim, a serialization failure) is the database
// resolving a contention, not the message's failure: retried, never given up on, and never
// rejected even when marked or classified permanent. What is counted is deliveries (Message.Attempt,
// the broker's count): a delivery that is not given up on (those, an outage, InFlight) is still one,
// so a handler whose first failure comes at Attempt >= MaxAttempts gives up at once.
// Ack happens only after the outcome is durable (committed). An ack that is lost on the way (the
// process dies right after the commit) costs a redelivery, which finds the record and is acknowledged
// as a Duplicate. Retry delays double per delivery attempt from Options.RetryDelay (1s) up to
// Options.MaxRetryDelay (1m); an InFlight delay is the holder's remaining lease, kept between
// RetryDelay and that growing delay (so the first is RetryDelay). Where the
// broker keeps no delivery count (a RabbitMQ classic queue: Message.AttemptsUncounted) the delay
// cannot grow, so redeliveries wait MaxRetryDelay, and MaxAttempts above 2 is refused
// (ErrMisconfigured): use a quorum queue. Dead letters are at least once: each message dead-lettered
// is one dead letter (a rejected message published twice is two), and the JetStream adapter names its
// dead-letter publish after the message's place in the stream, so a dead-letter stream deduplicates
// only a repeat of the same dead-lettering.
//
// # Keys and poison
//
// The key is the publisher's message id (Nats-Msg-Id, AMQP message-id) unless Options.Key derives one
// from the message; the scope is the queue ("<stream>/<consumer>", or the AMQP queue) unless
// Options.Scope is set. A message without a usable key cannot be deduplicated: it is dead-lettered
// (Poison) and logged, never run and never dropped silently. Publishers must therefore set a message
// id that stays the same when they publish again, and a different one for each new message. A scope
// that cannot be one is a configuration error, not a message's: New refuses an invalid
// Options.Scope (checked with the idemkit Guard's Options.MaxKeyLen), and a queue name unusable as
// the scope (empty, too long) makes the adapters stop with ErrMisconfigured at its first message.
//
// # Ordering and concurrency
//
//   - One key takes effect at most once. With a Locker in front of the Store it also runs at most
//     once at a time: a concurrent delivery of the same key gets InFlight. Without one, Execute mode
//     still runs it once at a time (the claim waits or answers InFlight), while Tx mode lets
//     concurrent deliveries run and keeps only the first commit (see below). Different keys run in
//     parallel across workers and processes.
//   - No ordering is promised. Parallel workers and consumers, retries after a delay and redeliveries
//     all reorder messages; a message that fails is retried after later ones have been handled — except
//     on a RabbitMQ classic queue, which puts a requeued message back at its head: there a message that
//     keeps failing, held in the only prefetch slot while its delay runs (Prefetch defaults to
//     Workers), is delivered again at once and the messages behind it wait, for good with MaxAttempts 0.
//     Use a quorum queue (requeued messages go behind the others), or set MaxAttempts, or a Prefetch
//     well above Workers. If order matters, make handlers commutative or check a version in the
//     handler; a single worker with one message in flight (JetStream MaxAckPending = 1, RabbitMQ
//     prefetch 1 and a single active consumer) keeps order only until the first Retry.
//   - Records count for idemkit Options.TTL (24h by default): a duplicate arriving later runs again.
//     Keep TTL above the broker's longest redelivery horizon and the publishers' retry horizon.
//   - Tx mode without a Locker: concurrent deliveries of one key may all run the handler; the
//     first to commit wins, the others' record INSERT waits for it, finds the record, rolls their
//     writes back and ends with the stored outcome (Duplicate); on a Galera cluster, through other
//     nodes, their COMMIT fails certification instead, and they end the same way. Nothing is
//     applied twice, but the handler's work is wasted and a handler's own writes may still
//     deadlock with each other (the database picks a victim: Failed, retried). A Locker (Redis)
//     turns them away as InFlight first.
//   - A handler runs inside the claim's lease: set idemkit Options.Lease above the handler's longest
//     run (or use the Watchdog), and the broker's redelivery timeout (JetStream AckWait) above it too.
//
// A Guard and the HandleFuncs it returns are safe for concurrent use.
package msgx
