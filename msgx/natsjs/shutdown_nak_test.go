package natsjs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// TestShutdownHandsFetchedMessagesBack: messages fetched ahead of the workers (Options.MaxMessages)
// and not handled when Consume stopped were left to the server, which redelivered them only after
// the consumer's AckWait (30 s by default): a rolling restart held them up that long although another
// instance was pulling. They are now handed back (Nak) as Consume stops, and the next pull gets them
// at once.
func TestShutdownHandsFetchedMessagesBack(t *testing.T) {
	f := setup(t, nil)
	ctx := context.Background()
	var err error
	f.cons, err = f.js.CreateOrUpdateConsumer(ctx, f.stream, jetstream.ConsumerConfig{
		Durable: "handback", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 10 * time.Minute, MaxDeliver: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"b-1", "b-2", "b-3"} {
		f.publish(t, id, "")
	}
	var mu sync.Mutex
	ran := map[string]int{}
	record := func(m *msgx.Message) {
		mu.Lock()
		defer mu.Unlock()
		ran[m.ID]++
	}
	started := make(chan struct{}, 3)
	first := f.mg.Execute(func(ctx context.Context, m *msgx.Message) error {
		record(m)
		started <- struct{}{}
		<-ctx.Done() // runs until Consume stops
		return nil   // and succeeds all the same
	})
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- natsjs.Consume(cctx, f.js, f.cons, first, &natsjs.Options{MaxMessages: 3}) }()
	<-started
	time.Sleep(200 * time.Millisecond) // the other two are fetched, waiting for the worker
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A second instance: it gets the two others well before the 10-minute AckWait.
	all := make(chan struct{})
	second := f.mg.Execute(func(ctx context.Context, m *msgx.Message) error {
		record(m)
		mu.Lock()
		defer mu.Unlock()
		if len(ran) == 3 {
			select {
			case <-all:
			default:
				close(all)
			}
		}
		return nil
	})
	c2, cancel2 := context.WithCancel(ctx)
	done2 := make(chan error, 1)
	go func() { done2 <- natsjs.Consume(c2, f.js, f.cons, second, nil) }()
	select {
	case <-all:
	case <-time.After(20 * time.Second):
	}
	cancel2()
	if err := <-done2; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 3 {
		t.Fatalf("handled %v: the messages fetched by the stopped consumer were not handed back (they wait out AckWait)", ran)
	}
}
