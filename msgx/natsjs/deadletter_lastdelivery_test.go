package natsjs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// TestDeadLetterFailureOnTheLastDeliveryIsNotLost: a message to dead-letter on the consumer's last
// delivery (MaxDeliver) whose dead letter cannot be published for a while (the dead-letter stream
// does not capture the subject yet) was Nak'ed "to be redelivered rather than lost" — but the server
// does not redeliver past MaxDeliver: the message was dropped, never dead-lettered. On the last
// delivery the adapter keeps the message (in progress) and publishes the copy again until it lands.
func TestDeadLetterFailureOnTheLastDeliveryIsNotLost(t *testing.T) {
	f := setup(t, &msgx.Options{RetryDelay: 100 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond})
	ctx := context.Background()
	var err error
	f.cons, err = f.js.CreateOrUpdateConsumer(ctx, f.stream, jetstream.ConsumerConfig{
		Durable: "once", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The dead-letter stream captures another subject for now: every publish to f.dlq fails.
	cfg := f.dlqS.CachedInfo().Config
	captured := cfg.Subjects
	cfg.Subjects = []string{f.dlqName + ".elsewhere"}
	if _, err := f.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	f.publish(t, "perm-last", "perm")
	var decisions atomic.Int32
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- natsjs.Consume(cctx, f.js, f.cons, f.handler(), &natsjs.Options{
			DeadLetterSubject: f.dlq, PublishTimeout: 300 * time.Millisecond,
			Observe: func(*msgx.Message, msgx.Decision) { decisions.Add(1) },
		})
	}()
	for decisions.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // the publish failed; past AckWait too
	cfg.Subjects = captured             // the dead-letter stream is back
	if _, err := f.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var dead int
	for range 100 {
		if dead = len(f.dead(t)); dead > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if dead != 1 {
		t.Fatalf("%d dead letters of a rejected message on its last delivery, want 1 (the message was dropped)", dead)
	}
	if n := decisions.Load(); n != 1 {
		t.Errorf("%d decisions, want 1 (MaxDeliver 1)", n)
	}
	f.drained(t)
}

// A consumer deleted while a dead letter is held on its last delivery stops Consume, as it does
// otherwise: the held dead letter does not keep it waiting.
func TestConsumerGoneWhileADeadLetterIsHeld(t *testing.T) {
	f := setup(t, &msgx.Options{RetryDelay: 100 * time.Millisecond})
	ctx := context.Background()
	var err error
	f.cons, err = f.js.CreateOrUpdateConsumer(ctx, f.stream, jetstream.ConsumerConfig{
		Durable: "gone", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.publish(t, "perm-gone", "perm")
	var decisions atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- natsjs.Consume(ctx, f.js, f.cons, f.handler(), &natsjs.Options{
			DeadLetterSubject: f.dlqName + "_nostream.dead", PublishTimeout: 300 * time.Millisecond,
			Observe: func(*msgx.Message, msgx.Decision) { decisions.Add(1) },
		})
	}()
	for decisions.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := f.js.DeleteConsumer(ctx, f.stream, "gone"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, jetstream.ErrConsumerDeleted) && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("Consume: %v, want the consumer gone", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("Consume did not return after its consumer was deleted")
	}
}
