package natsjs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

var errFlaky = errors.New("flaky")

// fixture is a stream, a dead-letter stream, a durable pull consumer and a msgx.Guard on memory.
type fixture struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  string
	dlq     string // dead-letter subject, captured by its own stream
	dlqS    jetstream.Stream
	cons    jetstream.Consumer
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

func setup(t *testing.T, mopts *msgx.Options) *fixture {
	t.Helper()
	f := &fixture{runs: map[string]int{}, decided: make(chan decided, 100)}
	f.nc, f.js = testbroker.NATS(t)
	// The smallest duplicate window JetStream accepts, so that tests can publish a message id again.
	_, f.stream = testbroker.Stream(t, f.js, "msgx_", &jetstream.StreamConfig{Duplicates: 100 * time.Millisecond})
	var dlqName string
	f.dlqS, dlqName = testbroker.Stream(t, f.js, "msgx_dlq_", nil)
	f.dlq = dlqName + ".dead"
	ctx := context.Background()
	var err error
	f.cons, err = f.js.CreateOrUpdateConsumer(ctx, f.stream, jetstream.ConsumerConfig{
		Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 10 * time.Second,
	})
	if err != nil {
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

// handler counts runs per message id; "perm" fails permanently, "flaky" fails on its first attempt.
func (f *fixture) handler() msgx.HandleFunc {
	return f.mg.Execute(func(ctx context.Context, m *msgx.Message) error {
		f.mu.Lock()
		f.runs[m.ID]++
		f.mu.Unlock()
		switch {
		case m.Header.Get("Kind") == "perm":
			return idemkit.Permanent(errors.New("order is invalid"))
		case m.Header.Get("Kind") == "flaky" && m.Attempt == 1:
			return errFlaky
		}
		return nil
	})
}

func (f *fixture) publish(t *testing.T, id, kind string) {
	t.Helper()
	m := nats.NewMsg(f.stream + ".orders")
	m.Data = []byte("order " + id)
	if kind != "" {
		m.Header.Set("Kind", kind)
	}
	var opts []jetstream.PublishOpt
	if id != "" {
		opts = append(opts, jetstream.WithMsgID(id))
	}
	ack, err := f.js.PublishMsg(context.Background(), m, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Duplicate {
		t.Fatalf("JetStream dropped %s as a duplicate inside its window", id)
	}
}

// run consumes until n decisions were made, and returns them.
func (f *fixture) run(t *testing.T, n int, opts *natsjs.Options) []decided {
	t.Helper()
	var o natsjs.Options
	if opts != nil {
		o = *opts
	}
	o.Observe = func(m *msgx.Message, d msgx.Decision) { f.decided <- decided{m, d} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- natsjs.Consume(ctx, f.js, f.cons, f.handler(), &o) }()
	var out []decided
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case d := <-f.decided:
			out = append(out, d)
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
	return out
}

// drained waits for the consumer to have nothing undelivered or unacknowledged (acks are
// asynchronous: the last one may still be on its way when Consume returns).
func (f *fixture) drained(t *testing.T) {
	t.Helper()
	var info *jetstream.ConsumerInfo
	for range 200 {
		var err error
		if info, err = f.cons.Info(context.Background()); err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Errorf("consumer has %d unacknowledged and %d undelivered messages, want none", info.NumAckPending, info.NumPending)
}

func TestConsumeSettlesEveryOutcome(t *testing.T) {
	f := setup(t, &msgx.Options{RetryDelay: 50 * time.Millisecond})
	f.publish(t, "ok-1", "")
	f.publish(t, "perm-1", "perm")
	f.publish(t, "", "") // no Nats-Msg-Id: poison
	f.publish(t, "flaky-1", "flaky")
	time.Sleep(150 * time.Millisecond) // past JetStream's duplicate window
	f.publish(t, "ok-1", "")           // the same id again: idemkit's duplicate
	f.publish(t, "perm-1", "perm")

	got := map[string][]msgx.Outcome{}
	for _, d := range f.run(t, 7, &natsjs.Options{Workers: 2, DeadLetterSubject: f.dlq}) {
		got[d.m.ID] = append(got[d.m.ID], d.d.Outcome)
		if d.m.Queue != f.stream+"/worker" {
			t.Errorf("Queue %q", d.m.Queue)
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
	f.mu.Lock()
	if f.runs["ok-1"] != 1 || f.runs["perm-1"] != 1 || f.runs[""] != 0 || f.runs["flaky-1"] != 2 {
		t.Errorf("handler runs %v, want ok-1 ×1, perm-1 ×1, none for the poison message, flaky-1 ×2", f.runs)
	}
	f.mu.Unlock()
	f.drained(t)

	// The dead-letter stream holds the rejected message (its duplicate deduplicated by the dead-letter
	// stream's own window, as both carry its id) and the poison one, with the reasons.
	info, err := f.dlqS.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("dead-letter stream holds %d messages, want 2", info.State.Msgs)
	}
	outcomes := map[string]string{}
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		raw, err := f.dlqS.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		outcomes[raw.Header.Get(natsjs.HeaderOutcome)] = raw.Header.Get(natsjs.HeaderError)
		if raw.Header.Get(natsjs.HeaderSubject) != f.stream+".orders" || raw.Header.Get(natsjs.HeaderStreamSeq) == "" {
			t.Errorf("dead letter headers %v", raw.Header)
		}
	}
	if outcomes["rejected"] != "order is invalid" || outcomes["poison"] != msgx.ErrNoKey.Error() {
		t.Errorf("dead letters: %v", outcomes)
	}
}

// Without a dead-letter subject the message is terminated: JetStream stops delivering it and says so
// on its advisory subject.
func TestDeadLetterWithoutSubjectTerminates(t *testing.T) {
	f := setup(t, nil)
	adv := make(chan *nats.Msg, 4)
	sub, err := f.nc.ChanSubscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."+f.stream+".worker", adv)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	f.publish(t, "perm-2", "perm")
	for _, d := range f.run(t, 1, nil) {
		if d.d.Action != msgx.DeadLetter {
			t.Fatalf("decision %v", d.d)
		}
	}
	select {
	case <-adv:
	case <-time.After(10 * time.Second):
		t.Fatal("no MSG_TERMINATED advisory")
	}
	f.drained(t)
	if rec, err := f.guard.Get(context.Background(), f.stream+"/worker", "perm-2"); err != nil || rec.Status != idemkit.StatusRejected {
		t.Errorf("record %+v, %v; want REJECTED", rec, err)
	}
}

// JetStream drops a repeated Nats-Msg-Id only inside the stream's duplicate window (2 minutes by
// default); idemkit's record catches the repeats after it, for its TTL (24h by default).
func TestPublishDedupeWindowAgainstIdemkit(t *testing.T) {
	f := setup(t, nil)
	ctx := context.Background()
	a1, err := f.js.Publish(ctx, f.stream+".orders", []byte("x"), jetstream.WithMsgID("w-1"))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := f.js.Publish(ctx, f.stream+".orders", []byte("x"), jetstream.WithMsgID("w-1"))
	if err != nil {
		t.Fatal(err)
	}
	if a1.Duplicate || !a2.Duplicate || a2.Sequence != a1.Sequence {
		t.Fatalf("inside the window: acks %+v %+v, want the second dropped as a duplicate", a1, a2)
	}
	time.Sleep(150 * time.Millisecond)
	f.publish(t, "w-1", "") // after the window JetStream stores it again
	var outs []msgx.Outcome
	for _, d := range f.run(t, 2, nil) {
		outs = append(outs, d.d.Outcome)
	}
	if len(outs) != 2 || outs[0] != msgx.Processed || outs[1] != msgx.Duplicate {
		t.Fatalf("outcomes %v, want processed then duplicate", outs)
	}
}

func TestConsumeValidates(t *testing.T) {
	f := setup(t, nil)
	ctx := context.Background()
	none, err := f.js.CreateOrUpdateConsumer(ctx, f.stream, jetstream.ConsumerConfig{Durable: "noack", AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		t.Fatal(err)
	}
	if err := natsjs.Consume(ctx, f.js, none, f.handler(), nil); !errors.Is(err, natsjs.ErrAckPolicy) {
		t.Errorf("AckNone consumer: %v, want ErrAckPolicy", err)
	}
	if err := natsjs.Consume(ctx, nil, f.cons, f.handler(), &natsjs.Options{DeadLetterSubject: "x"}); err == nil {
		t.Error("DeadLetterSubject without JetStream accepted")
	}
	if err := natsjs.Consume(ctx, f.js, f.cons, f.handler(), &natsjs.Options{Workers: -1}); err == nil {
		t.Error("negative Workers accepted")
	}
	if err := natsjs.Consume(ctx, f.js, f.cons, nil, nil); err == nil {
		t.Error("nil handler accepted")
	}
}
