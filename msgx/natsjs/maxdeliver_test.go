package natsjs_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// TestMaxDeliverDeadLettersTheLastDelivery: a consumer with MaxDeliver and a handler that keeps
// failing with a retryable error, where msgx.Options.MaxAttempts does not stop it first (0, or not
// below MaxDeliver). The last delivery was Nak'ed like the others and the server, at MaxDeliver,
// dropped the message: no dead letter although a dead-letter subject was configured, only a
// MAX_DELIVERIES advisory nobody subscribes to. The adapter knows the consumer's MaxDeliver: the
// last delivery's failure gives up (GaveUp) and is dead-lettered with its data and headers.
func TestMaxDeliverDeadLettersTheLastDelivery(t *testing.T) {
	for _, maxAttempts := range []int{0, 3, 5} {
		t.Run(fmt.Sprintf("MaxAttempts=%d", maxAttempts), func(t *testing.T) {
			f := setup(t, &msgx.Options{RetryDelay: 20 * time.Millisecond, MaxAttempts: maxAttempts})
			var err error
			f.cons, err = f.js.CreateOrUpdateConsumer(context.Background(), f.stream, jetstream.ConsumerConfig{
				Durable: "capped", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 10 * time.Second, MaxDeliver: 3,
			})
			if err != nil {
				t.Fatal(err)
			}
			f.publish(t, "fail-1", "always")
			var runs atomic.Int32
			h := f.mg.Execute(func(context.Context, *msgx.Message) error {
				runs.Add(1)
				return errFlaky
			})
			var last atomic.Value
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			err = natsjs.Consume(ctx, f.js, f.cons, h, &natsjs.Options{DeadLetterSubject: f.dlq,
				Observe: func(_ *msgx.Message, d msgx.Decision) { last.Store(d) }})
			if err != nil {
				t.Fatal(err)
			}
			if n := runs.Load(); n != 3 {
				t.Fatalf("handler ran %d times, want MaxDeliver (3)", n)
			}
			if d := last.Load().(msgx.Decision); d.Outcome != msgx.GaveUp || d.Action != msgx.DeadLetter {
				t.Errorf("last decision %v, want gave-up, dead-lettered", d)
			}
			dead := f.dead(t)
			if len(dead) != 1 {
				t.Fatalf("%d dead letters of a message the server stopped delivering at MaxDeliver, want 1", len(dead))
			}
			if h := dead[0].Header; string(dead[0].Data) != "order fail-1" || h.Get("Kind") != "always" ||
				h.Get("Idemkit-Orig-Msg-Id") != "fail-1" || h.Get(natsjs.HeaderOutcome) != "gave-up" {
				t.Errorf("dead letter %q %v", dead[0].Data, h)
			}
		})
	}
}

// TestInFlightOnTheLastDeliveryIsDeadLettered: a handler running past the consumer's AckWait is
// redelivered while it runs — "harmless", the guard answers InFlight — but when that redelivery is
// the consumer's last (MaxDeliver) its Nak ended the message's deliveries, and the handler's own
// retryable failure, Nak'ed after it, was never redelivered: the message was lost, without a dead
// letter. An InFlight delivery on the last delivery gives up (GaveUp, dead-lettered) too; should the
// holder succeed, the dead letter's replay is a Duplicate.
func TestInFlightOnTheLastDeliveryIsDeadLettered(t *testing.T) {
	f := setup(t, &msgx.Options{RetryDelay: 50 * time.Millisecond})
	var err error
	f.cons, err = f.js.CreateOrUpdateConsumer(context.Background(), f.stream, jetstream.ConsumerConfig{
		Durable: "slow", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.publish(t, "slow-1", "")
	var runs atomic.Int32
	h := f.mg.Execute(func(context.Context, *msgx.Message) error {
		runs.Add(1)
		time.Sleep(1500 * time.Millisecond) // past AckWait: delivery 2 finds the key in flight
		return errFlaky
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := natsjs.Consume(ctx, f.js, f.cons, h, &natsjs.Options{Workers: 2, DeadLetterSubject: f.dlq}); err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want once", n)
	}
	dead := f.dead(t)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters of a message whose last delivery found it in flight, want 1", len(dead))
	}
	if h := dead[0].Header; h.Get("Idemkit-Orig-Msg-Id") != "slow-1" || h.Get(natsjs.HeaderOutcome) != "gave-up" {
		t.Errorf("dead letter %v", h)
	}
}
