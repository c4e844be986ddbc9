package amqp_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/amqp"
)

var errFlaky = errors.New("flaky")

type fixture struct {
	conn    *amqp091.Connection
	pub     *amqp091.Channel
	topo    amqp.Topology
	guard   *idemkit.Guard
	mg      *msgx.Guard
	mu      sync.Mutex
	runs    map[string]int
	decided chan decided
}

type decided struct {
	m *msgx.Message
	d msgx.Decision
}

func setup(t *testing.T, mopts *msgx.Options, qargs amqp091.Table) *fixture {
	t.Helper()
	f := &fixture{runs: map[string]int{}, decided: make(chan decided, 100)}
	f.conn = testbroker.AMQP(t)
	f.pub = testbroker.Channel(t, f.conn)
	var err error
	if f.topo, err = amqp.Declare(f.pub, testsvc.Name("msgx_"), qargs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch, err := f.conn.Channel()
		if err == nil {
			err = f.topo.Delete(ch)
			_ = ch.Close()
		}
		if err != nil {
			t.Logf("deleting %+v: %v", f.topo, err)
		}
	})
	if err := f.pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if f.guard, err = idemkit.New(memory.NewStore(), nil); err != nil {
		t.Fatal(err)
	}
	if f.mg, err = msgx.New(f.guard, mopts); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) handler() msgx.HandleFunc {
	return f.mg.Execute(func(ctx context.Context, m *msgx.Message) error {
		f.mu.Lock()
		f.runs[m.ID]++
		f.mu.Unlock()
		switch {
		case m.Header.Get("kind") == "perm":
			return idemkit.Permanent(errors.New("order is invalid"))
		case m.Header.Get("kind") == "flaky" && m.Attempt == 1, m.Header.Get("kind") == "fail":
			return errFlaky
		}
		return nil
	})
}

// publish publishes a persistent message and waits for the broker's confirmation.
func (f *fixture) publish(t *testing.T, id, kind string) {
	t.Helper()
	p := amqp091.Publishing{MessageId: id, DeliveryMode: amqp091.Persistent, Body: []byte("order " + id)}
	if kind != "" {
		p.Headers = amqp091.Table{"kind": kind}
	}
	dc, err := f.pub.PublishWithDeferredConfirmWithContext(context.Background(), "", f.topo.Queue, false, false, p)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v %v", ok, err)
	}
}

func (f *fixture) run(t *testing.T, n int, opts *amqp.Options) []decided {
	t.Helper()
	var o amqp.Options
	if opts != nil {
		o = *opts
	}
	o.Observe = func(m *msgx.Message, d msgx.Decision) { f.decided <- decided{m, d} }
	ch := testbroker.Channel(t, f.conn)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- amqp.Consume(ctx, ch, f.topo.Queue, f.handler(), &o) }()
	var out []decided
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case d := <-f.decided:
			if d.d.Outcome != msgx.InFlight { // a copy that met another in flight: its redelivery counts
				out = append(out, d)
			}
		case err := <-done:
			t.Fatalf("Consume returned early: %v", err)
		case <-timeout:
			cancel()
			t.Fatalf("only %d of %d decisions: %v", len(out), n, out)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Consume after cancel: %v", err)
	}
	_ = ch.Close()
	return out
}

func (f *fixture) count(t *testing.T, queue string) int {
	t.Helper()
	q, err := f.pub.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// eventually waits for queue to hold n ready messages (dead-lettering and requeueing are asynchronous).
func (f *fixture) eventually(t *testing.T, queue string, n int) {
	t.Helper()
	got := 0
	for range 200 {
		if got = f.count(t, queue); got == n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s holds %d messages, want %d", queue, got, n)
}

func TestConsumeSettlesEveryOutcome(t *testing.T) {
	for name, args := range map[string]amqp091.Table{"classic": nil, "quorum": {"x-queue-type": "quorum"}} {
		t.Run(name, func(t *testing.T) {
			f := setup(t, &msgx.Options{RetryDelay: 50 * time.Millisecond}, args)
			f.publish(t, "ok-1", "")
			f.publish(t, "perm-1", "perm")
			f.publish(t, "", "") // no message-id: poison
			f.publish(t, "flaky-1", "flaky")
			f.publish(t, "ok-1", "") // published twice: the broker has no publish-side dedupe
			f.publish(t, "perm-1", "perm")

			got := map[string][]msgx.Outcome{}
			var flakyRetry *msgx.Message
			for _, d := range f.run(t, 7, &amqp.Options{Workers: 2}) {
				got[d.m.ID] = append(got[d.m.ID], d.d.Outcome)
				if d.m.ID == "flaky-1" && d.d.Outcome == msgx.Processed {
					flakyRetry = d.m
				}
			}
			for id, want := range map[string][]msgx.Outcome{
				"ok-1":    {msgx.Processed, msgx.Duplicate},
				"perm-1":  {msgx.Rejected, msgx.Rejected},
				"":        {msgx.Poison},
				"flaky-1": {msgx.Failed, msgx.Processed},
			} {
				if len(got[id]) != len(want) || got[id][0] != want[0] || got[id][len(want)-1] != want[len(want)-1] {
					t.Errorf("%q: outcomes %v, want %v", id, got[id], want)
				}
			}
			if flakyRetry == nil || !flakyRetry.Redelivered || flakyRetry.Attempt != 2 {
				t.Errorf("the requeued delivery: %+v, want Redelivered and Attempt 2", flakyRetry)
			}
			f.mu.Lock()
			if f.runs["ok-1"] != 1 || f.runs["perm-1"] != 1 || f.runs[""] != 0 || f.runs["flaky-1"] != 2 {
				t.Errorf("handler runs %v, want ok-1 ×1, perm-1 ×1, none for the poison message, flaky-1 ×2", f.runs)
			}
			f.mu.Unlock()
			if n := f.count(t, f.topo.Queue); n != 0 {
				t.Errorf("%d messages left in the queue", n)
			}
			// The dead-letter exchange routed both deliveries of the rejected message and the poison one.
			f.eventually(t, f.topo.DeadLetterQueue, 3)
		})
	}
}

// Cancelling Consume requeues a delivery waiting out its retry delay at once, rather than holding it.
func TestStopRequeuesDelayedDeliveries(t *testing.T) {
	f := setup(t, &msgx.Options{RetryDelay: time.Hour, MaxRetryDelay: time.Hour}, nil)
	f.publish(t, "flaky-2", "flaky")
	ds := f.run(t, 1, nil)
	if ds[0].d.Action != msgx.Retry || ds[0].d.Delay != time.Hour {
		t.Fatalf("decision %v", ds[0].d)
	}
	f.eventually(t, f.topo.Queue, 1) // Consume returned: the delivery is back in the queue, ready
	ds = f.run(t, 1, nil)
	if ds[0].d.Outcome != msgx.Processed || !ds[0].m.Redelivered {
		t.Fatalf("redelivery: %v %+v", ds[0].d, ds[0].m)
	}
}

// consuming waits (at most 10 s) until the fixture's queue has its one consumer.
func (f *fixture) consuming(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		q, err := f.pub.QueueDeclarePassive(f.topo.Queue, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q.Consumers == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue has %d consumers 10 s after Consume started, want 1", q.Consumers)
		}
	}
}

func TestConsumeReportsAClosedChannel(t *testing.T) {
	f := setup(t, nil, nil)
	ch := testbroker.Channel(t, f.conn)
	done := make(chan error, 1)
	go func() { done <- amqp.Consume(context.Background(), ch, f.topo.Queue, f.handler(), nil) }()
	// Closed once Consume consumes (closed before, its Qos or Consume call fails instead).
	f.consuming(t)
	_ = ch.Close()
	select {
	case err := <-done:
		if !errors.Is(err, amqp.ErrChannelClosed) {
			t.Fatalf("%v, want ErrChannelClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not return after the channel closed")
	}
	// The error names Workers alone: Prefetch, unset, defaults to it (it also named "Prefetch
	// (-1)"; found by a defect hunt).
	if err := amqp.Consume(context.Background(), ch, f.topo.Queue, f.handler(), &amqp.Options{Workers: -1}); err == nil ||
		!strings.Contains(err.Error(), "Workers") || strings.Contains(err.Error(), "Prefetch") {
		t.Errorf("negative Workers: %v; want an error naming Workers alone", err)
	}
	if err := amqp.Consume(context.Background(), ch, f.topo.Queue, f.handler(), &amqp.Options{Prefetch: -1}); err == nil ||
		!strings.Contains(err.Error(), "Prefetch") {
		t.Errorf("negative Prefetch: %v; want an error naming Prefetch", err)
	}
	if err := amqp.Consume(context.Background(), nil, f.topo.Queue, f.handler(), nil); err == nil {
		t.Error("nil channel accepted")
	}
}

// A queue deleted under Consume: the broker cancels the consumer and the channel stays open, which
// Consume reported as a closed channel.
func TestConsumeReportsACancelledConsumer(t *testing.T) {
	f := setup(t, nil, nil)
	ch := testbroker.Channel(t, f.conn)
	done := make(chan error, 1)
	go func() { done <- amqp.Consume(context.Background(), ch, f.topo.Queue, f.handler(), nil) }()
	f.consuming(t)
	if _, err := f.pub.QueueDelete(f.topo.Queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, amqp.ErrConsumerCancelled) || errors.Is(err, amqp.ErrChannelClosed) {
			t.Fatalf("%v, want ErrConsumerCancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not return after its queue was deleted")
	}
	if ch.IsClosed() {
		t.Fatal("the channel closed: the case this test is about did not happen")
	}
}

func TestDeclareValidates(t *testing.T) {
	f := setup(t, nil, nil)
	if _, err := amqp.Declare(f.pub, "", nil); err == nil {
		t.Error("empty queue name accepted")
	}
	if _, err := amqp.Declare(f.pub, "q", amqp091.Table{"x-dead-letter-exchange": "x"}); err == nil {
		t.Error("a caller's x-dead-letter-exchange accepted")
	}
	// Declaring again with the same arguments is a no-op.
	if _, err := amqp.Declare(f.pub, f.topo.Queue, nil); err != nil {
		t.Errorf("declaring again: %v", err)
	}
}

// An empty queue name is refused: RabbitMQ consumed the channel's last declared queue, and every
// message was dead-lettered as Poison ("" is no record scope).
func TestConsumeRefusesAnEmptyQueueName(t *testing.T) {
	f := setup(t, nil, nil)
	ch := testbroker.Channel(t, f.conn)
	if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := amqp.Consume(ctx, ch, "", f.handler(), nil); err == nil || ctx.Err() != nil {
		t.Fatalf("Consume on \"\": %v, want an error at once", err)
	}
}

// MaxAttempts on each queue type. A quorum queue counts deliveries (x-delivery-count): the backoff
// grows and the message gives up on attempt 3. A classic queue does not: every redelivery was Attempt
// 2, so MaxAttempts 3 never gave up and the message looped every 2×RetryDelay; MaxAttempts 2 works
// there, a larger one stops Consume with msgx.ErrMisconfigured at the first redelivery, the message
// back in the queue.
func TestMaxAttemptsByQueueType(t *testing.T) {
	opts := func(max int) *msgx.Options {
		return &msgx.Options{RetryDelay: 20 * time.Millisecond, MaxRetryDelay: time.Second, MaxAttempts: max}
	}
	gaveUp := func(t *testing.T, f *fixture, attempts int) {
		t.Helper()
		f.publish(t, "fail-1", "fail")
		ds := f.run(t, attempts, nil)
		for i, d := range ds {
			if d.m.Attempt != i+1 {
				t.Errorf("delivery %d: Attempt %d", i+1, d.m.Attempt)
			}
			if i < attempts-1 && (d.d.Outcome != msgx.Failed || d.d.Delay != 20*time.Millisecond<<i) {
				t.Errorf("delivery %d: %v, want Failed after %s", i+1, d.d, 20*time.Millisecond<<i)
			}
		}
		if last := ds[attempts-1].d; last.Action != msgx.DeadLetter || last.Outcome != msgx.GaveUp {
			t.Errorf("delivery %d: %v, want GaveUp", attempts, last)
		}
		f.eventually(t, f.topo.DeadLetterQueue, 1)
	}
	t.Run("quorum", func(t *testing.T) { gaveUp(t, setup(t, opts(3), amqp091.Table{"x-queue-type": "quorum"}), 3) })
	t.Run("classic, MaxAttempts 2", func(t *testing.T) { gaveUp(t, setup(t, opts(2), nil), 2) })
	t.Run("classic, MaxAttempts 3", func(t *testing.T) {
		f := setup(t, opts(3), nil)
		f.publish(t, "fail-1", "fail")
		ch := testbroker.Channel(t, f.conn)
		var mu sync.Mutex
		var seen []msgx.Decision
		done := make(chan error, 1)
		go func() {
			done <- amqp.Consume(context.Background(), ch, f.topo.Queue, f.handler(), &amqp.Options{Observe: func(m *msgx.Message, d msgx.Decision) {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, d)
			}})
		}()
		select {
		case err := <-done:
			if !errors.Is(err, msgx.ErrMisconfigured) {
				t.Fatalf("Consume: %v, want ErrMisconfigured", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Consume did not stop")
		}
		_ = ch.Close()
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 2 || seen[0].Outcome != msgx.Failed || !errors.Is(seen[1].Err, msgx.ErrMisconfigured) {
			t.Errorf("decisions %v, want Failed, then the misconfiguration", seen)
		}
		f.mu.Lock()
		if f.runs["fail-1"] != 1 {
			t.Errorf("handler ran %d times, want once", f.runs["fail-1"])
		}
		f.mu.Unlock()
		f.eventually(t, f.topo.Queue, 1)
		if n := f.count(t, f.topo.DeadLetterQueue); n != 0 {
			t.Errorf("%d messages dead-lettered", n)
		}
	})
}

// TestAttemptFromAcquiredCount: RabbitMQ 4.3 counts in x-delivery-count only failed deliveries
// (basic.reject, not the basic.nack requeue this package retries with, nor a consumer that died), and
// counts every delivery in x-acquired-count. A redelivery from a quorum queue carrying only
// x-acquired-count was taken for a classic queue's (Attempt 2, AttemptsUncounted), which stopped a
// consumer with MaxAttempts above 2 as misconfigured and made every retry wait MaxRetryDelay.
func TestAttemptFromAcquiredCount(t *testing.T) {
	for _, c := range []struct {
		headers amqp091.Table
		attempt int
	}{
		{amqp091.Table{"x-acquired-count": int64(2)}, 3},
		{amqp091.Table{"x-acquired-count": int64(3), "x-delivery-count": int64(1)}, 4},
		{amqp091.Table{"x-delivery-count": int64(2)}, 3},
	} {
		m := amqp.Message(&amqp091.Delivery{MessageId: "m1", Redelivered: true, Headers: c.headers}, "q")
		if m.Attempt != c.attempt || m.AttemptsUncounted {
			t.Errorf("headers %v: Attempt %d (uncounted %v), want %d, counted", c.headers, m.Attempt, m.AttemptsUncounted, c.attempt)
		}
	}
}
