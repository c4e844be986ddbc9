package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idemkit/msgx/natsjs"
)

// TestConsumeRefusesAPushConsumer: Consume pulls, and every pull from a push consumer (one with a
// DeliverSubject) fails with the server's "Consumer is push based", which Consume took for a passing
// failure: it retried until its context ended, consumed nothing and returned nil — silently, with the
// default Logger. A push consumer is refused at once, as one without explicit acks is.
func TestConsumeRefusesAPushConsumer(t *testing.T) {
	f := setup(t, nil)
	push, err := f.js.CreateOrUpdateConsumer(context.Background(), f.stream, jetstream.ConsumerConfig{
		Durable: "push", AckPolicy: jetstream.AckExplicitPolicy, DeliverSubject: f.stream + "_push.inbox",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err = natsjs.Consume(ctx, f.js, push, f.handler(), nil)
	if err == nil || time.Since(start) > time.Second {
		t.Fatalf("Consume of a push consumer returned %v after %s, want an error at once", err, time.Since(start).Round(time.Millisecond))
	}
	t.Log(err)
}
