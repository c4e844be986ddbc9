package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	dlqName string // the dead-letter stream's name: it captures "<dlqName>.>"
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
	f.dlqS, f.dlqName = testbroker.Stream(t, f.js, "msgx_dlq_", nil)
	f.dlq = f.dlqName + ".dead"
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
	ack, err := f.js.PublishMsg(context.Background(), f.msg(id, kind), f.msgID(id)...)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Duplicate {
		t.Fatalf("JetStream dropped %s as a duplicate inside its window", id)
	}
}

func (f *fixture) msg(id, kind string) *nats.Msg {
	m := nats.NewMsg(f.stream + ".orders")
	m.Data = []byte("order " + id)
	if kind != "" {
		m.Header.Set("Kind", kind)
	}
	return m
}

func (f *fixture) msgID(id string) []jetstream.PublishOpt {
	if id == "" {
		return nil
	}
	return []jetstream.PublishOpt{jetstream.WithMsgID(id)}
}

// publishAgain publishes m under an id published before, once the stream's duplicate window (100
// ms) has let the id go. The server forgets ids on a purge timer, not on lookup, so a publish well
// past the window can still be answered Duplicate (nothing stored): it is published again until
// stored, for at most 10 s.
func (f *fixture) publishAgain(t *testing.T, m *nats.Msg, id string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(25 * time.Millisecond) {
		ack, err := f.js.PublishMsg(context.Background(), m, f.msgID(id)...)
		if err != nil {
			t.Fatal(err)
		}
		if !ack.Duplicate {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream still holds %s as a duplicate 10 s after its 100 ms window", id)
		}
	}
}

// run consumes until n decisions were made, and returns them. In-flight decisions (a copy that met
// another copy of its key in flight, with two workers) are not counted: the copy is redelivered, and
// its next decision is.
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
			if d.d.Outcome != msgx.InFlight {
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
	// The same ids again, past JetStream's duplicate window: idemkit's duplicates.
	f.publishAgain(t, f.msg("ok-1", ""), "ok-1")
	f.publishAgain(t, f.msg("perm-1", "perm"), "perm-1")

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

	// The dead-letter stream holds both copies of the rejected message (two messages in the stream,
	// two dead letters, though they share an id) and the poison one, with the reasons.
	info, err := f.dlqS.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 3 {
		t.Fatalf("dead-letter stream holds %d messages, want 3", info.State.Msgs)
	}
	outcomes := map[string]string{}
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		raw, err := f.dlqS.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if o := raw.Header.Get(natsjs.HeaderOutcome); outcomes[o] == "" {
			outcomes[o] = raw.Header.Get(natsjs.HeaderError) // the first of each
		}
		if raw.Header.Get(natsjs.HeaderSubject) != f.stream+".orders" || raw.Header.Get(natsjs.HeaderStreamSeq) == "" {
			t.Errorf("dead letter headers %v", raw.Header)
		}
	}
	if outcomes["rejected"] != "order is invalid" || outcomes["poison"] != msgx.ErrNoKey.Error() {
		t.Errorf("dead letters: %v", outcomes)
	}
}

// dead returns the dead-letter stream's messages.
func (f *fixture) dead(t *testing.T) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	info, err := f.dlqS.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		raw, err := f.dlqS.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, raw)
	}
	return out
}

// The original's JetStream headers (publish expectations, its Nats-Msg-Id) are kept on the dead
// letter under Idemkit-Orig- names: copied as they are, Nats-Expected-Stream made the dead-letter
// stream refuse every copy (error 10060) and the message loop through NakWithDelay.
func TestDeadLetterRenamesJetStreamHeaders(t *testing.T) {
	f := setup(t, nil)
	m := nats.NewMsg(f.stream + ".orders")
	m.Data = []byte("order exp-1")
	m.Header.Set("Kind", "perm")
	m.Header.Set("Nats-Expected-Last-Subject-Sequence", "0")
	if _, err := f.js.PublishMsg(context.Background(), m, jetstream.WithMsgID("exp-1"), jetstream.WithExpectStream(f.stream)); err != nil {
		t.Fatal(err)
	}
	ds := f.run(t, 1, &natsjs.Options{DeadLetterSubject: f.dlq})
	if ds[0].d.Outcome != msgx.Rejected {
		t.Fatalf("decision %v", ds[0].d)
	}
	f.drained(t)
	dead := f.dead(t)
	if len(dead) != 1 {
		t.Fatalf("dead-letter stream holds %d messages, want 1", len(dead))
	}
	h := dead[0].Header
	for name, want := range map[string]string{
		"Kind":                         "perm",
		"Idemkit-Orig-Msg-Id":          "exp-1",
		"Idemkit-Orig-Expected-Stream": f.stream,
		"Idemkit-Orig-Expected-Last-Subject-Sequence": "0",
		"Nats-Expected-Stream":                        "",
		"Nats-Expected-Last-Subject-Sequence":         "",
		natsjs.HeaderOutcome:                          "rejected",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("dead letter header %s = %q, want %q (headers %v)", name, got, want, h)
		}
	}
	if id := h.Get(jetstream.MsgIDHeader); id == "exp-1" || id == "" {
		t.Errorf("dead letter's Nats-Msg-Id %q, want its own", id)
	}
}

// A message id reused for another message is dead-lettered again: the first dead letter's id in
// the dead-letter stream's duplicate window silently swallowed the second (the original terminated,
// nothing stored).
func TestDeadLetterPerMessageNotPerID(t *testing.T) {
	f := setup(t, &msgx.Options{Fingerprint: msgx.DataFingerprint})
	f.publish(t, "x-1", "perm")
	m := nats.NewMsg(f.stream + ".orders")
	m.Data = []byte("another payload")
	f.publishAgain(t, m, "x-1") // past the stream's duplicate window
	var outs []msgx.Outcome
	for _, d := range f.run(t, 2, &natsjs.Options{DeadLetterSubject: f.dlq}) {
		outs = append(outs, d.d.Outcome)
	}
	if len(outs) != 2 || outs[0] != msgx.Rejected || outs[1] != msgx.Poison {
		t.Fatalf("outcomes %v, want rejected then poison", outs)
	}
	f.drained(t)
	dead := f.dead(t)
	if len(dead) != 2 {
		t.Fatalf("dead-letter stream holds %d messages, want 2", len(dead))
	}
	for i, o := range []string{"rejected", "poison"} {
		if got := dead[i].Header.Get(natsjs.HeaderOutcome); got != o || dead[i].Header.Get("Idemkit-Orig-Msg-Id") != "x-1" {
			t.Errorf("dead letter %d: %v, want %s of x-1", i, dead[i].Header, o)
		}
	}
}

// A dead letter the dead-letter stream reports as a duplicate counts as stored only when it is the
// same dead-lettering (a publish of ours repeated after a lost ack): the same message of the same
// consumer, with the same outcome. Another message stored under its id is not: the original is
// redelivered rather than terminated.
func TestDeadLetterDuplicateMustBeTheSameDeadLetter(t *testing.T) {
	f := setup(t, nil)
	ctx := context.Background()
	f.publish(t, "dup-1", "perm")
	f.publish(t, "dup-2", "perm")
	stream, err := f.js.Stream(ctx, f.stream)
	if err != nil {
		t.Fatal(err)
	}
	queue := f.stream + "/worker"
	// What the adapter publishes for each (the id names the consumer, the stream sequence and stored
	// time, and the outcome): dup-1's as if an earlier publish of ours was stored and its ack lost,
	// dup-2's id taken by another message.
	for seq, h := range map[uint64]nats.Header{
		1: {natsjs.HeaderQueue: {queue}, natsjs.HeaderStreamSeq: {"1"}, natsjs.HeaderOutcome: {"rejected"}},
		2: {"Other": {"yes"}},
	} {
		raw, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(f.dlq)
		m.Header = h
		id := fmt.Sprintf("%s:%d:%d:rejected", queue, seq, raw.Time.UnixNano())
		ack, err := f.js.PublishMsg(ctx, m, jetstream.WithMsgID(id))
		if err != nil {
			t.Fatal(err)
		}
		if ack.Duplicate {
			t.Fatalf("%s: a duplicate", id)
		}
	}
	ds := f.run(t, 3, &natsjs.Options{DeadLetterSubject: f.dlq})
	attempts := map[string][]int{}
	for _, d := range ds {
		if d.d.Outcome != msgx.Rejected {
			t.Errorf("decision %v", d.d)
		}
		attempts[d.m.ID] = append(attempts[d.m.ID], d.m.Attempt)
	}
	// dup-1: terminated on its first delivery; dup-2: redelivered (NakWithDelay 1s), not terminated.
	if len(attempts["dup-1"]) != 1 || len(attempts["dup-2"]) != 2 || attempts["dup-2"][1] != 2 {
		t.Errorf("attempts %v, want dup-1 once and dup-2 redelivered", attempts)
	}
	if n := len(f.dead(t)); n != 2 {
		t.Errorf("dead-letter stream holds %d messages, want the 2 published before", n)
	}
}

// A consumer whose "<stream>/<consumer>" cannot be the record's scope (longer than the Guard's
// MaxKeyLen) stops at its first message, which is given back: it made every message Poison and
// dead-lettered them all.
func TestConsumeStopsWhenTheQueueCannotBeTheScope(t *testing.T) {
	f := setup(t, nil)
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{MaxKeyLen: len(f.stream) + 3})
	if err != nil {
		t.Fatal(err)
	}
	if f.mg, err = msgx.New(g, nil); err != nil {
		t.Fatal(err)
	}
	f.publish(t, "cfg-1", "")
	f.publish(t, "cfg-2", "")
	done := make(chan error, 1)
	go func() {
		done <- natsjs.Consume(context.Background(), f.js, f.cons, f.handler(), &natsjs.Options{DeadLetterSubject: f.dlq})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, msgx.ErrMisconfigured) {
			t.Fatalf("Consume: %v, want ErrMisconfigured", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not stop")
	}
	f.mu.Lock()
	if len(f.runs) != 0 {
		t.Errorf("handler runs %v, want none", f.runs)
	}
	f.mu.Unlock()
	if n := len(f.dead(t)); n != 0 {
		t.Errorf("%d messages dead-lettered, want none", n)
	}
	info, err := f.cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending+uint64(info.NumAckPending) != 2 {
		t.Errorf("consumer has %d undelivered and %d unacknowledged messages, want both messages kept", info.NumPending, info.NumAckPending)
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
	f.publishAgain(t, f.msg("w-1", ""), "w-1") // after the window JetStream stores it again
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
	// The error names Workers alone: MaxMessages, unset, defaults to it (it also named
	// "MaxMessages (-1)"; found by a defect hunt).
	if err := natsjs.Consume(ctx, f.js, f.cons, f.handler(), &natsjs.Options{Workers: -1}); err == nil ||
		!strings.Contains(err.Error(), "Workers") || strings.Contains(err.Error(), "MaxMessages") {
		t.Errorf("negative Workers: %v; want an error naming Workers alone", err)
	}
	if err := natsjs.Consume(ctx, f.js, f.cons, f.handler(), &natsjs.Options{MaxMessages: -1}); err == nil ||
		!strings.Contains(err.Error(), "MaxMessages") {
		t.Errorf("negative MaxMessages: %v; want an error naming MaxMessages", err)
	}
	if err := natsjs.Consume(ctx, f.js, f.cons, nil, nil); err == nil {
		t.Error("nil handler accepted")
	}
}

// A consumer that is gone when no pull request is open — deleted (or removed for inactivity) before
// Consume started, or during its backoff after a failed pull — stops Consume as one deleted during a
// pull does. It returned only when a pull request was open at the deletion, and otherwise logged
// "no heartbeat received" every 10 s forever.
func TestConsumeStopsWhenTheConsumerIsGone(t *testing.T) {
	f := setup(t, nil)
	if err := f.js.DeleteConsumer(context.Background(), f.stream, "worker"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- natsjs.Consume(context.Background(), f.js, f.cons, f.handler(), nil) }()
	select {
	case err := <-done:
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatalf("Consume returned %v, want ErrConsumerNotFound", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Consume still running 30 s after its consumer was deleted")
	}
}

// TestConsumeStopsWhenTheConsumerIsDeletedBetweenPulls: the consumer is deleted while no pull is open
// (the batch fetched is still being handed to the workers), so no pull hears of it; the next pull,
// sent to a consumer that is gone, is never answered. Consume noticed after two missed idle
// heartbeats, nats.go's default 5 s each: 10 s (found by a flaky test under load). It asks for them
// every 2 s now.
func TestConsumeStopsWhenTheConsumerIsDeletedBetweenPulls(t *testing.T) {
	f := setup(t, nil)
	ctx := context.Background()
	f.publish(t, "between-1", "")
	f.publish(t, "between-2", "")
	started, release := make(chan struct{}, 2), make(chan struct{})
	h := f.mg.Execute(func(ctx context.Context, m *msgx.Message) error {
		started <- struct{}{}
		<-release
		return nil
	})
	done := make(chan error, 1)
	go func() {
		done <- natsjs.Consume(ctx, f.js, f.cons, h, &natsjs.Options{Workers: 1, MaxMessages: 2})
	}()
	<-started
	// Both messages delivered: the one worker holds the first, the pull loop the second, and the
	// batch of two is complete — no pull is open.
	for {
		info, err := f.cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := f.js.DeleteConsumer(ctx, f.stream, "worker"); err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case err := <-done:
		if !errors.Is(err, jetstream.ErrConsumerDeleted) && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("Consume: %v, want the consumer gone", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("Consume did not return within 8 s after its consumer was deleted between two pulls")
	}
}
