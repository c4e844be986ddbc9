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

// TestDeadLetterSubjectDeliveredToTheConsumerIsRefused: a DeadLetterSubject that the consumer's own
// stream captures and its filter passes ("ORDERS.dead" beside "ORDERS.>") sent every dead letter
// back to the consumer as a new message, keyed by the dead letter's own Nats-Msg-Id: the handler ran
// it (a poison message included), dead-lettered it again, and so on without end. Consume now refuses
// it before pulling anything; a consumer filtered to other subjects of the stream may use it.
func TestDeadLetterSubjectDeliveredToTheConsumerIsRefused(t *testing.T) {
	f := setup(t, nil)
	f.publish(t, "perm-1", "perm")
	dead := f.stream + ".dead" // captured by the stream's "<stream>.>"

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var decisions atomic.Int32
	err := natsjs.Consume(ctx, f.js, f.cons, f.handler(), &natsjs.Options{DeadLetterSubject: dead,
		Observe: func(*msgx.Message, msgx.Decision) { decisions.Add(1) }})
	if !errors.Is(err, msgx.ErrMisconfigured) || decisions.Load() != 0 {
		t.Fatalf("Consume returned %v after %d decisions, want ErrMisconfigured before any", err, decisions.Load())
	}

	// A consumer of the orders alone dead-letters into the same stream, once.
	if f.cons, err = f.js.CreateOrUpdateConsumer(context.Background(), f.stream, jetstream.ConsumerConfig{
		Durable: "orders", FilterSubject: f.stream + ".orders", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 10 * time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	got := f.run(t, 1, &natsjs.Options{DeadLetterSubject: dead})
	if got[0].d.Outcome != msgx.Rejected {
		t.Fatalf("decision %v, want rejected", got[0].d)
	}
	stream, err := f.js.Stream(context.Background(), f.stream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.GetLastMsgForSubject(context.Background(), dead); err != nil {
		t.Fatalf("no dead letter on %s: %v", dead, err)
	}
}
