package natsjs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// TestShutdownKeepsFetchedMessagesOnTheirLastDelivery: messages fetched ahead of the workers
// (Options.MaxMessages) and not handled when Consume stops are left to the server, which redelivers
// them after AckWait — but not past the consumer's MaxDeliver: one fetched on its last delivery was
// dropped, never run and never dead-lettered. It is dead-lettered (GaveUp, its handler never ran).
func TestShutdownKeepsFetchedMessagesOnTheirLastDelivery(t *testing.T) {
	f := setup(t, nil)
	ctx := context.Background()
	var err error
	f.cons, err = f.js.CreateOrUpdateConsumer(ctx, f.stream, jetstream.ConsumerConfig{
		Durable: "stopping", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s-1", "s-2", "s-3"} {
		f.publish(t, id, "")
	}
	started := make(chan struct{}, 3)
	var runs atomic.Int32
	h := f.mg.Execute(func(ctx context.Context, m *msgx.Message) error {
		runs.Add(1)
		started <- struct{}{}
		<-ctx.Done() // runs until Consume stops
		return nil   // and succeeds all the same
	})
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- natsjs.Consume(cctx, f.js, f.cons, h, &natsjs.Options{MaxMessages: 3, DeadLetterSubject: f.dlq})
	}()
	<-started
	time.Sleep(200 * time.Millisecond) // the other two are fetched, waiting for the worker
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past AckWait
	info, err := f.cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dead := f.dead(t)
	t.Logf("runs %d, ack floor %d, pending %d, ack pending %d, redelivered %d, dead letters %d",
		runs.Load(), info.AckFloor.Stream, info.NumPending, info.NumAckPending, info.NumRedelivered, len(dead))
	for _, d := range dead {
		if d.Header.Get(natsjs.HeaderOutcome) != "gave-up" {
			t.Errorf("dead letter %v, want gave-up", d.Header)
		}
	}
	if handled := int(runs.Load()) + len(dead); handled != 3 {
		t.Fatalf("%d messages ran and %d were dead-lettered of 3 on their last delivery: %d lost", runs.Load(), len(dead), 3-handled)
	}
}
