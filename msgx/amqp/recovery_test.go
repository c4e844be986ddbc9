package amqp_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/amqp"
)

// TestRecoveredChannelNeverSettlesAnEarlierDelivery: on a connection with amqp091's automatic
// recovery (Config.Recovery), the channel comes back after a connection loss with its consumer, and
// with delivery tags counted from 1 again. A handler that ran across the loss settled its delivery by
// its old tag there, which named another delivery by then: one still in its handler was acknowledged,
// and lost when the consumer died before it finished. Consume now settles nothing taken before the
// loss, takes nothing after it and returns ErrChannelClosed; the recovered channel, closed, gives back
// what it was sent.
func TestRecoveredChannelNeverSettlesAnEarlierDelivery(t *testing.T) {
	f := setup(t, &msgx.Options{RetryDelay: 10 * time.Second, MaxRetryDelay: 10 * time.Second}, nil)
	proxy, _, ch := recovering(t)

	started := make(chan string, 10)
	gates := map[string]chan struct{}{"m1": make(chan struct{}), "m2": make(chan struct{})}
	runs := map[string]int{}
	h := f.mg.Execute(func(ctx context.Context, m *msgx.Message) error {
		f.mu.Lock()
		runs[m.ID]++
		f.mu.Unlock()
		started <- m.ID
		if g := gates[m.ID]; g != nil {
			select {
			case <-g:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	decisions := make(chan decided, 20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- amqp.Consume(ctx, ch, f.topo.Queue, h, &amqp.Options{Workers: 2, Prefetch: 3,
			Observe: func(m *msgx.Message, d msgx.Decision) { decisions <- decided{m, d} }})
	}()
	waitStart := func(want string) {
		t.Helper()
		select {
		case id := <-started:
			if id != want {
				t.Fatalf("handler started for %s, want %s", id, want)
			}
		case err := <-done:
			t.Fatalf("Consume returned while waiting for %s: %v", want, err)
		case <-time.After(20 * time.Second):
			t.Fatalf("timed out waiting for %s", want)
		}
	}
	// delivered waits until the queue has one consumer and no message ready.
	delivered := func() {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			q, err := f.pub.QueueDeclarePassive(f.topo.Queue, true, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			if q.Consumers == 1 && q.Messages == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("queue %+v, want one consumer and nothing ready", q)
			}
		}
	}
	f.publish(t, "m0", "") // delivery tag 1, acknowledged
	waitStart("m0")
	f.publish(t, "m1", "") // tag 2: its handler runs across the connection loss
	waitStart("m1")
	proxy.Cut()
	proxy.Restore()
	delivered() // the recovered consumer got m1 again, requeued when the connection ended: tag 1
	f.publish(t, "m2", "")
	delivered() // and m2: tag 2
	close(gates["m1"])
	select {
	case err := <-done:
		if !errors.Is(err, amqp.ErrChannelClosed) {
			t.Fatalf("Consume: %v, want ErrChannelClosed", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Consume did not return after its channel's connection was lost")
	}
	close(gates["m2"])
	// Nothing was settled on the recovered channel (its consumer subscribed again: delivered above);
	// closed, it gives m1 and m2 back.
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	f.eventually(t, f.topo.Queue, 2)

	got := map[string]msgx.Outcome{}
	for _, d := range f.run(t, 2, nil) {
		got[d.m.ID] = d.d.Outcome
	}
	if got["m1"] != msgx.Duplicate || got["m2"] != msgx.Processed {
		t.Fatalf("after the loss: %v, want m1 a duplicate and m2 processed", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if runs["m0"] != 1 || runs["m1"] != 1 || f.runs["m2"] != 1 || runs["m2"] != 0 || f.runs["m1"] != 0 {
		t.Fatalf("runs %v on the recovering connection, %v after; want m0 and m1 once there, m2 once after", runs, f.runs)
	}
	if n := f.count(t, f.topo.Queue); n != 0 {
		t.Fatalf("%d messages left", n)
	}
}

// TestLossOfAnIdleRecoveringConsumer: a consumer on a connection amqp091 recovers, with no handler
// running when the connection is lost, returns ErrChannelClosed at once, while the connection is still
// down. Consume must not close the channel (an earlier version of the fix did): amqp091 keeps a channel
// closed while its connection is down among those the connection's recovery reopens, refusing to
// reopen, and the recovery fails for good. The connection recovers; the channel, open again with the
// consumer subscribed anew, is the caller's to close, and a new Consume on the connection takes the
// messages.
func TestLossOfAnIdleRecoveringConsumer(t *testing.T) {
	f := setup(t, nil, nil)
	proxy, conn, ch := recovering(t)
	// Open again once the connection's recovery ended, the consumer subscribed again: only then is
	// closing the channel safe with amqp091.
	reopened := make(chan struct{})
	states := make(chan *amqp091.StateChanged, 16)
	conn.NotifyStateChange(states)
	go func() {
		once := false
		for sc := range states {
			if sc.From == amqp091.StateReconnecting && sc.To == amqp091.StateOpen && !once {
				once = true
				close(reopened)
			}
		}
	}()
	done := make(chan error, 1)
	go func() { done <- amqp.Consume(context.Background(), ch, f.topo.Queue, f.handler(), nil) }()
	f.consuming(t)
	proxy.Cut()
	select {
	case err := <-done:
		if !errors.Is(err, amqp.ErrChannelClosed) {
			t.Fatalf("Consume: %v, want ErrChannelClosed", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Consume did not return after its channel's connection was lost")
	}
	proxy.Restore()
	select {
	case <-reopened:
	case <-time.After(20 * time.Second):
		t.Fatalf("the connection did not recover (closed: %v)", conn.IsClosed())
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatalf("a channel on the recovered connection: %v", err)
	}
	f.publish(t, "after", "")
	decisions := make(chan msgx.Decision, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- amqp.Consume(ctx, ch2, f.topo.Queue, f.handler(), &amqp.Options{Observe: func(_ *msgx.Message, d msgx.Decision) { decisions <- d }})
	}()
	select {
	case d := <-decisions:
		if d.Outcome != msgx.Processed {
			t.Fatalf("after the recovery: %v", d)
		}
	case err := <-done:
		t.Fatalf("Consume on the recovered connection: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("nothing consumed on the recovered connection")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// recovering dials the broker through a proxy the test can cut, with amqp091's automatic recovery,
// and opens a channel.
func recovering(t *testing.T) (*testsvc.Proxy, *amqp091.Connection, *amqp091.Channel) {
	t.Helper()
	u, err := url.Parse(testbroker.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := testsvc.StartProxy(t, u.Host)
	u.Host = proxy.Addr()
	conn, err := amqp091.DialConfig(u.String(), amqp091.Config{
		Dial:     amqp091.DefaultDial(3 * time.Second),
		Recovery: &amqp091.Recovery{ReconnectionConfig: &amqp091.ReconnectionConfig{MaxRetryCount: 100, RetryInterval: 50 * time.Millisecond}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.CloseDeadline(time.Now().Add(time.Second)) })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return proxy, conn, ch
}
