package amqp_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/amqp"
)

// TestStopWithTheBrokerStalled: a broker that stopped answering (a connection silently black-holed,
// a frozen broker process), played by a proxy that stops forwarding either way. Consume cancelled its
// consumer and waited for the broker's answer, which never came: it returned only when the client
// library gave the connection up on its read deadline, about 14 s after its context ended. It now
// stops waiting after Options.CancelTimeout and returns ErrCancelUnconfirmed. Nothing is lost and
// nothing is acknowledged without its effect: once the connection is gone the broker requeues the
// delivery whose acknowledgement it never got (its redelivery answered Duplicate from the record) and
// those the handler never took.
func TestStopWithTheBrokerStalled(t *testing.T) {
	f := setup(t, nil, nil)
	for _, id := range []string{"s-1", "s-2", "s-3"} {
		f.publish(t, id, "")
	}
	uri, err := amqp091.ParseURI(testbroker.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	px := testsvc.StartProxy(t, net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)))
	host, port, _ := net.SplitHostPort(px.Addr())
	uri.Host, uri.Port = host, 0
	if uri.Port, err = strconv.Atoi(port); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp091.DialConfig(uri.String(), amqp091.Config{Dial: amqp091.DefaultDial(3 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	inner := f.handler()
	h := func(ctx context.Context, m *msgx.Message) msgx.Decision {
		dec := inner(ctx, m)
		if m.ID == "s-1" { // handled and recorded; its ack is sent once the broker is silent
			close(started)
			<-release
		}
		return dec
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	// Prefetch 3: s-2 and s-3 wait in the client library while s-1 runs.
	go func() { done <- amqp.Consume(ctx, ch, f.topo.Queue, h, &amqp.Options{Prefetch: 3}) }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("s-1 was not delivered in 10s")
	}
	px.Stall()
	cancel()
	close(release) // s-1's ack goes into the void
	// The bound: far above what Consume takes now (DefaultCancelTimeout, 2 s), far below the 14 s it
	// took.
	select {
	case err := <-done:
		if !errors.Is(err, amqp.ErrCancelUnconfirmed) {
			t.Fatalf("Consume = %v, want ErrCancelUnconfirmed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Consume has not returned 5s after its context ended, the broker silent")
	}
	// The program ends the connection, as ErrCancelUnconfirmed says, with a deadline (a channel's
	// Close would wait for the broker too): the broker requeues every delivery it had not seen
	// acknowledged.
	closed := make(chan error, 1)
	go func() { closed <- conn.CloseDeadline(time.Now().Add(500 * time.Millisecond)) }()
	select {
	case <-closed: // an error: the broker never answered the close either
	case <-time.After(5 * time.Second):
		t.Fatal("Connection.CloseDeadline has not returned in 5s")
	}
	// The call that cancelled the consumer, left waiting for the broker, ended with the connection.
	for deadline := time.Now().Add(5 * time.Second); consumeGoroutines() != ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a goroutine of Consume outlived its connection:\n%s", consumeGoroutines())
		}
	}
	got := map[string]msgx.Outcome{}
	for _, d := range f.run(t, 3, nil) {
		got[d.m.ID] = d.d.Outcome
	}
	if got["s-1"] != msgx.Duplicate || got["s-2"] != msgx.Processed || got["s-3"] != msgx.Processed {
		t.Errorf("after the restart: %v, want s-1 Duplicate (handled, its ack lost), s-2 and s-3 Processed", got)
	}
	f.mu.Lock()
	if f.runs["s-1"] != 1 || f.runs["s-2"] != 1 || f.runs["s-3"] != 1 {
		t.Errorf("handler runs %v, want one each", f.runs)
	}
	f.mu.Unlock()
	if n := f.count(t, f.topo.Queue); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
}

// consumeGoroutines returns the stacks of running goroutines that are in Consume's code.
func consumeGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "idemkit/msgx/amqp.Consume") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

func TestNegativeCancelTimeoutIsRefused(t *testing.T) {
	f := setup(t, nil, nil)
	ch := testbroker.Channel(t, f.conn)
	err := amqp.Consume(context.Background(), ch, f.topo.Queue, f.handler(), &amqp.Options{CancelTimeout: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "CancelTimeout") {
		t.Fatalf("Consume with a negative CancelTimeout: %v, want an error naming it", err)
	}
}
