package amqp_test

import (
	"context"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/amqp"
)

// TestFirstDeliveryIgnoresPublishedCounts: a message published with x-delivery-count or
// x-acquired-count headers of its own (a relay forwarding a quorum queue's redelivery with its
// headers, a replay tool) kept them on its first delivery, and Message took them for the broker's
// count: with MaxAttempts 3 its first retryable failure was dead-lettered GaveUp, the handler run once
// (found by a defect hunt). A delivery the broker does not flag as redelivered is the message's first:
// Attempt 1 whatever its headers say.
func TestFirstDeliveryIgnoresPublishedCounts(t *testing.T) {
	for _, qt := range []string{"quorum", "classic"} {
		t.Run(qt, func(t *testing.T) {
			f := setup(t, &msgx.Options{MaxAttempts: 2, RetryDelay: 10 * time.Millisecond}, amqp091.Table{"x-queue-type": qt})
			p := amqp091.Publishing{MessageId: "relayed-1", DeliveryMode: amqp091.Persistent, Body: []byte("order"),
				Headers: amqp091.Table{"kind": "fail", "x-delivery-count": int64(5), "x-acquired-count": int64(5)}}
			dc, err := f.pub.PublishWithDeferredConfirmWithContext(context.Background(), "", f.topo.Queue, false, false, p)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
				t.Fatalf("publish not confirmed: %v %v", ok, err)
			}
			ch := testbroker.Channel(t, f.conn)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			first := make(chan decided, 1)
			done := make(chan error, 1)
			go func() {
				done <- amqp.Consume(ctx, ch, f.topo.Queue, f.handler(), &amqp.Options{Observe: func(m *msgx.Message, d msgx.Decision) {
					select {
					case first <- decided{m, d}:
					default:
					}
				}})
			}()
			var got decided
			select {
			case got = <-first:
			case <-time.After(10 * time.Second):
				t.Fatal("no delivery")
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got.m.Attempt != 1 || got.d.Outcome != msgx.Failed {
				t.Fatalf("first delivery (redelivered %v): Attempt %d, decision %v; want Attempt 1, retried",
					got.m.Redelivered, got.m.Attempt, got.d)
			}
		})
	}
}
