// Package msgchaos is the chaos harness of idemkit's message consumers (package msgx on NATS
// JetStream and RabbitMQ): it tests the promise "every message takes effect exactly once, none is
// lost, and what cannot be handled is dead-lettered" with real brokers, a real MariaDB, several
// consumer processes and kill -9.
//
// [Run] creates, with names unique to the run, a record table, an effects table and a totals row in
// MariaDB, a Redis key prefix for the lock, and on the broker a stream with a dead-letter stream and
// a durable pull consumer (NATS; the stream's duplicate window is JetStream's shortest, 100ms) or a
// queue with a dead-letter exchange and queue (RabbitMQ). It then
//
//   - starts Config.Consumers consumer processes — this executable re-run in worker mode (call
//     [RunWorkerIfRequested] first thing in main or TestMain) — each running msgx in Tx mode with
//     Config.Workers workers, every other process without the Redis Locker (its duplicates meet the
//     others' in the database only): the handler inserts one effect row and adds the amount to the totals
//     row in the transaction msgx gives it; every n-th message is rejected by the business after
//     writing (its writes must roll back), every m-th fails once with a retryable error;
//   - publishes the messages in batches: a share of the ids (30% by default) two or three times, each
//     copy a batch gap (≥150ms) after the previous one so that JetStream's window does not drop it,
//     and a few poison messages without an id;
//   - SIGKILLs Config.Kills consumer processes while the messages flow, in turn inside a handler after
//     its writes and before its commit, after a commit and before the ack (the process waits in the
//     adapter's Observe hook), and at a random point, and starts a replacement for each;
//   - waits until the database shows every outcome, the broker holds nothing for the consumers and the
//     consumers are quiet, stops the consumers, and checks.
//
// With Config.NATSMaxDeliver (`idemchaos msg -nats-max-deliver N`) the JetStream consumer has that
// MaxDeliver and natsjs.Options.Records the msgx.Guard, and every other kill lands inside a handler on
// a message's last delivery (KillLast): the server then delivers the message no more and publishes a
// MAX_DELIVERIES advisory, from which the consumers still running settle it (natsjs, dropped.go). The
// consumers report each message settled so (its Observe hook sees a *jetstream.RawStreamMsg, not a
// delivery) and how each GaveUp came; the Report counts the messages settled from the advisory.
//
// The checker reads the tables with plain SQL and the dead letters from the broker: every message
// that should take effect has exactly one effect row with its amount and a SUCCEEDED record; every
// rejected message has none, a REJECTED record and a dead letter; every poison message is
// dead-lettered; no effect belongs to a message never published; the totals row agrees with the
// effect rows (conservation) and with the sum the plan expects; nothing is left on the broker. With
// MaxDeliver a message may instead end with no effect and a GaveUp dead letter (a rejected one without
// its REJECTED record), never with neither nor with two effects; one effect beside a GaveUp dead letter
// passes only when a consumer said it gave up from the advisory or on an InFlight last delivery (a
// delivery of the message ran meanwhile, as natsjs documents), and is listed apart. The
// effects table has no unique key on purpose. Sabotaged runs (a consumer without the guard, one
// that acknowledges before its handler commits) prove the checker catches duplicates and losses.
//
// Processes are started in their own process group with a parent-death signal and killed when Run
// returns; the tables, Redis keys, stream and queues are removed unless Config.Keep. The shared
// services are never restarted. Run it in the test suite (bounded: 300 messages, 3 kills per broker)
// and as a soak with `idemchaos msg` (scripts/soak.sh).
package msgchaos
