package natsjs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// TestDeadLetterPublishedBackKeepsItsKey: a dead letter carries a Nats-Msg-Id of its own (one per
// dead-lettering) and the original's under Idemkit-Orig-Msg-Id. Published back to the consumer's
// stream as it is (an operator's replay), it was handled under the dead letter's id, a key the guard
// had never seen: a message whose last delivery gave up InFlight while its holder went on to succeed
// ran again, where the docs promise "the dead letter's replay is a Duplicate", and a message
// dead-lettered for having no id ran as if it had one.
func TestDeadLetterPublishedBackKeepsItsKey(t *testing.T) {
	f := setup(t, &msgx.Options{RetryDelay: 50 * time.Millisecond})
	var err error
	f.cons, err = f.js.CreateOrUpdateConsumer(context.Background(), f.stream, jetstream.ConsumerConfig{
		Durable: "slow", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.publish(t, "slow-1", "")
	f.publish(t, "", "") // no Nats-Msg-Id: poison
	var runs atomic.Int32
	h := f.mg.Execute(func(_ context.Context, m *msgx.Message) error {
		runs.Add(1)
		if m.ID == "slow-1" && m.Attempt == 1 {
			time.Sleep(1500 * time.Millisecond) // past AckWait: delivery 2, the last, finds the key in flight
		}
		return nil
	})
	consume := func(d time.Duration, observe func(*msgx.Message, msgx.Decision)) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		if err := natsjs.Consume(ctx, f.js, f.cons, h, &natsjs.Options{Workers: 2, DeadLetterSubject: f.dlq, Observe: observe}); err != nil {
			t.Fatal(err)
		}
	}
	consume(3*time.Second, nil)
	dead := f.dead(t)
	if len(dead) != 2 || runs.Load() != 1 {
		t.Fatalf("%d dead letters and %d runs, want 2 (the in-flight one, the poison one) and 1", len(dead), runs.Load())
	}
	for _, d := range dead { // published back as they are
		m := nats.NewMsg(f.stream + ".orders")
		m.Header, m.Data = d.Header, d.Data
		if _, err := f.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan msgx.Decision, 10)
	consume(2*time.Second, func(m *msgx.Message, d msgx.Decision) { got <- d })
	close(got)
	outcomes := map[msgx.Outcome]int{}
	for d := range got {
		outcomes[d.Outcome]++
	}
	if runs.Load() != 1 || outcomes[msgx.Duplicate] != 1 || outcomes[msgx.Poison] != 1 {
		t.Errorf("dead letters published back: %d runs and outcomes %v, want 1 run, a duplicate and a poison message", runs.Load(), outcomes)
	}
}
