// Package paydemo is the shared business of the two consumer examples, examples/nats-consumer and
// examples/amqp-consumer: payments that credit accounts in MariaDB, applied by a msgx handler in Tx
// mode on an idemkit Guard (records in MariaDB, a Redis lock in front), the payments each example
// publishes (some of them twice), and the summary and checks it prints at the end. The examples add
// only what is specific to their broker: connecting, the queues and the dead letters, publishing and
// consuming.
//
// An example uses it in this order: [Open] a [Demo] (tables, Guard, handler) and defer
// [Demo.Close]; publish the messages of [NewPayments] with the broker's message id; [Consume] with
// [Demo.Handle] until every delivery was settled; count the dead letters; [Demo.Check].
package paydemo
