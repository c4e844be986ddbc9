package natsjs_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// Environment of a consumer process TestKilledOnTheLastDeliveryIsDeadLettered kills.
const (
	envDroppedStream   = "IDEMKIT_NATSJS_DROPPED_STREAM"
	envDroppedConsumer = "IDEMKIT_NATSJS_DROPPED_CONSUMER"
)

// TestDroppedWorker is the consumer process TestKilledOnTheLastDeliveryIsDeadLettered kills: it
// consumes with a handler that says "handling" and never returns.
func TestDroppedWorker(t *testing.T) {
	stream := os.Getenv(envDroppedStream)
	if stream == "" {
		t.Skip("run by TestKilledOnTheLastDeliveryIsDeadLettered")
	}
	_, js := testbroker.NATS(t)
	ctx := context.Background()
	cons, err := js.Consumer(ctx, stream, os.Getenv(envDroppedConsumer))
	if err != nil {
		t.Fatal(err)
	}
	g, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	mg, err := msgx.New(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := mg.Execute(func(ctx context.Context, m *msgx.Message) error {
		fmt.Printf("handling %s, delivery %d\n", m.ID, m.Attempt)
		select {} // until killed
	})
	t.Fatal(natsjs.Consume(ctx, js, cons, h, nil))
}

// TestKilledOnTheLastDeliveryIsDeadLettered: a consumer process killed (kill -9, OOM, a crash the
// message causes) during a message's last delivery (MaxDeliver) settles nothing; the server stops
// delivering the message once AckWait runs out, with only a MAX_DELIVERIES advisory: the message was
// lost, neither run nor dead-lettered. Two processes are killed on deliveries 1 and 2 of a
// MaxDeliver 2 consumer; the two consumers running then get the advisory and dead-letter the
// message, once: their copies share one Nats-Msg-Id. A work-queue stream then loses the message, as
// Term would have removed it; a limits stream keeps it.
func TestKilledOnTheLastDeliveryIsDeadLettered(t *testing.T) {
	for _, retention := range []jetstream.RetentionPolicy{jetstream.WorkQueuePolicy, jetstream.LimitsPolicy} {
		t.Run(retention.String(), func(t *testing.T) {
			_, js := testbroker.NATS(t)
			ctx := context.Background()
			stream, name := testbroker.Stream(t, js, "msgx_killed_", &jetstream.StreamConfig{Retention: retention})
			dlqS, _ := testbroker.Stream(t, js, name+"_dlq", nil) // captures "<name>_dlq<random>.>"
			dlq := dlqS.CachedInfo().Config.Name + ".dead"
			if _, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
				Durable: "crashing", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 2,
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, name+".orders", []byte("order k-1"), jetstream.WithMsgID("k-1")); err != nil {
				t.Fatal(err)
			}
			for delivery := 1; delivery <= 2; delivery++ {
				killOnDelivery(t, name, "crashing", delivery)
			}

			// Two consumer processes run now: the first pull past AckWait has the server drop the
			// message and publish the advisory, which both get.
			cctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var decisions []msgx.Decision
			for range 2 {
				_, js := testbroker.NATS(t)
				cons, err := js.Consumer(ctx, name, "crashing")
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					err := natsjs.Consume(cctx, js, cons, func(context.Context, *msgx.Message) msgx.Decision {
						t.Error("the handler ran past MaxDeliver")
						return msgx.Decision{Action: msgx.Ack, Outcome: msgx.Processed}
					}, &natsjs.Options{DeadLetterSubject: dlq, Observe: func(_ *msgx.Message, d msgx.Decision) {
						mu.Lock()
						decisions = append(decisions, d)
						mu.Unlock()
					}})
					if err != nil {
						t.Error(err)
					}
				})
			}
			var dead []*jetstream.RawStreamMsg
			for deadline := time.Now().Add(30 * time.Second); len(dead) == 0 && time.Now().Before(deadline); {
				time.Sleep(100 * time.Millisecond)
				dead = deadLetters(t, dlqS)
			}
			time.Sleep(500 * time.Millisecond) // the other consumer's copy, if it is to be stored
			cancel()
			wg.Wait()
			dead = deadLetters(t, dlqS)
			t.Logf("decisions of the two consumers: %v", decisions)
			if len(dead) != 1 {
				t.Fatalf("%d dead letters of a message whose consumer was killed on its last delivery, want 1 (decisions %v)", len(dead), decisions)
			}
			h := dead[0].Header
			if string(dead[0].Data) != "order k-1" || h.Get("Idemkit-Orig-Msg-Id") != "k-1" || h.Get(natsjs.HeaderOutcome) != "gave-up" ||
				h.Get(natsjs.HeaderStreamSeq) != "1" || !strings.Contains(h.Get(natsjs.HeaderError), "MaxDeliver") {
				t.Errorf("dead letter %q %v", dead[0].Data, h)
			}
			info, err := stream.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[jetstream.RetentionPolicy]uint64{jetstream.WorkQueuePolicy: 0, jetstream.LimitsPolicy: 1}[retention]; info.State.Msgs != want {
				t.Errorf("the stream holds %d messages, want %d", info.State.Msgs, want)
			}
		})
	}
}

// killOnDelivery runs a consumer process (TestDroppedWorker) on stream's consumer and kills it
// (SIGKILL) once its handler runs delivery of the message.
func killOnDelivery(t *testing.T, stream, consumer string, delivery int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDroppedWorker$")
	cmd.Env = append(os.Environ(), envDroppedStream+"="+stream, envDroppedConsumer+"="+consumer)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()
	lines := make(chan string)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(out); sc.Scan(); {
			lines <- sc.Text()
		}
	}()
	want := fmt.Sprintf("handling k-1, delivery %d", delivery)
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the consumer process ended before %q", want)
			}
			if line == want {
				return // killed by the deferred Kill, in the middle of the handler
			}
		case <-timeout:
			t.Fatalf("the consumer process did not print %q within 30s", want)
		}
	}
}

// deadLetters returns the messages of the dead-letter stream s.
func deadLetters(t *testing.T, s jetstream.Stream) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		raw, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, raw)
	}
	return out
}

// TestDroppedAdvisoryOfASettledMessage: a MAX_DELIVERIES advisory for a message whose record is
// finished — the race of a last delivery settled as AckWait ran out — dead-letters nothing more: one
// that took effect is a Duplicate (nothing dead-lettered), one rejected and dead-lettered by its
// delivery is dead-lettered again under the same Nats-Msg-Id, which the dead-letter stream keeps once.
func TestDroppedAdvisoryOfASettledMessage(t *testing.T) {
	f := setup(t, nil)
	ctx := context.Background()
	var err error
	f.cons, err = f.js.CreateOrUpdateConsumer(ctx, f.stream, jetstream.ConsumerConfig{
		Durable: "settled", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 10 * time.Second, MaxDeliver: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.publish(t, "done-1", "")
	f.publish(t, "perm-1", "perm")
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- natsjs.Consume(cctx, f.js, f.cons, f.handler(), &natsjs.Options{DeadLetterSubject: f.dlq, Records: f.mg,
			Observe: func(m *msgx.Message, d msgx.Decision) { f.decided <- decided{m, d} }})
	}()
	next := func() decided {
		t.Helper()
		select {
		case d := <-f.decided:
			return d
		case <-time.After(30 * time.Second):
			t.Fatal("no decision within 30s")
		}
		return decided{}
	}
	for range 2 {
		if d := next(); d.d.Outcome != msgx.Processed && d.d.Outcome != msgx.Rejected {
			t.Fatalf("decision %v of %s", d.d, d.m.ID)
		}
	}
	f.drained(t)
	for seq := range uint64(2) {
		adv, err := json.Marshal(map[string]any{"type": "io.nats.jetstream.advisory.v1.max_deliver",
			"stream": f.stream, "consumer": "settled", "stream_seq": seq + 1, "deliveries": 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.nc.Publish(natsjs.AdvisoryMaxDeliveries+"."+f.stream+".settled", adv); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]msgx.Decision{} // settled apart, in any order
	for range 2 {
		d := next()
		got[d.m.ID] = d.d
	}
	for id, want := range map[string]msgx.Decision{
		"done-1": {Action: msgx.Ack, Outcome: msgx.Duplicate},
		"perm-1": {Action: msgx.DeadLetter, Outcome: msgx.Rejected},
	} {
		if d, ok := got[id]; !ok || d.Action != want.Action || d.Outcome != want.Outcome {
			t.Errorf("advisory of %s: decision %v, want %v (decisions %v)", id, d, want, got)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	dead := f.dead(t)
	if len(dead) != 1 || dead[0].Header.Get("Idemkit-Orig-Msg-Id") != "perm-1" || dead[0].Header.Get(natsjs.HeaderOutcome) != "rejected" {
		for _, d := range dead {
			t.Logf("dead letter %v", d.Header)
		}
		t.Fatalf("%d dead letters, want perm-1's alone (rejected)", len(dead))
	}
}

// TestDroppedWhileItsHandlerRunsWaitsForIt: a handler run past AckWait on the message's last delivery
// has the server stop delivering the message (the advisory) while it runs; its key is held. The
// message is not dead-lettered while the holder may still settle it: it succeeds, and the message
// is a Duplicate, not a dead letter of a message that took effect.
func TestDroppedWhileItsHandlerRunsWaitsForIt(t *testing.T) {
	f := setup(t, nil)
	ctx := context.Background()
	var err error
	f.cons, err = f.js.CreateOrUpdateConsumer(ctx, f.stream, jetstream.ConsumerConfig{
		Durable: "slowlast", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.publish(t, "slow-1", "")
	h := f.mg.Execute(func(context.Context, *msgx.Message) error {
		time.Sleep(2500 * time.Millisecond) // past AckWait: the server gives up on the delivery
		return nil
	})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- natsjs.Consume(cctx, f.js, f.cons, h, &natsjs.Options{Workers: 2, DeadLetterSubject: f.dlq, Records: f.mg,
			Observe: func(m *msgx.Message, d msgx.Decision) { f.decided <- decided{m, d} }})
	}()
	var outcomes []msgx.Outcome
	for len(outcomes) < 2 {
		select {
		case d := <-f.decided:
			outcomes = append(outcomes, d.d.Outcome)
		case <-time.After(30 * time.Second):
			t.Fatalf("decisions %v within 30s, want the handler's and the advisory's", outcomes)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if outcomes[0] != msgx.Processed || outcomes[1] != msgx.Duplicate {
		t.Errorf("outcomes %v, want processed (the handler), then duplicate (the advisory)", outcomes)
	}
	if dead := f.dead(t); len(dead) != 0 {
		t.Errorf("%d dead letters of a message that took effect, want none", len(dead))
	}
}

// TestDroppedMessagesAreSettledApart: the messages of several advisories are settled apart: one that
// waits for its key's holder (or whose dead letter cannot be published) holds up no other, which is
// dead-lettered while the first still waits; the first, its holder succeeded, is a Duplicate.
func TestDroppedMessagesAreSettledApart(t *testing.T) {
	f := setup(t, nil)
	ctx := context.Background()
	var err error
	// The consumer's filter passes none of the messages: only the advisories settle them.
	f.cons, err = f.js.CreateOrUpdateConsumer(ctx, f.stream, jetstream.ConsumerConfig{
		Durable: "apart", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 2, FilterSubject: f.stream + ".none",
	})
	if err != nil {
		t.Fatal(err)
	}
	f.publish(t, "held-1", "")
	f.publish(t, "free-1", "")
	claim, _, err := f.guard.Begin(ctx, idemkit.Call{Scope: f.stream + "/apart", Key: "held-1"})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- natsjs.Consume(cctx, f.js, f.cons, f.handler(), &natsjs.Options{DeadLetterSubject: f.dlq, Records: f.mg,
			Observe: func(m *msgx.Message, d msgx.Decision) { f.decided <- decided{m, d} }})
	}()
	f.pulling(t) // and so subscribed to the advisory
	for seq := range uint64(2) {
		adv, err := json.Marshal(map[string]any{"stream": f.stream, "consumer": "apart", "stream_seq": seq + 1, "deliveries": 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.nc.Publish(natsjs.AdvisoryMaxDeliveries+"."+f.stream+".apart", adv); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case d := <-f.decided:
		if d.m.ID != "free-1" || d.d.Outcome != msgx.GaveUp {
			t.Fatalf("decision %v of %s, want free-1 given up while held-1's holder runs", d.d, d.m.ID)
		}
	case <-time.After(20 * time.Second): // held-1's holder keeps its key for 30s
		t.Fatal("free-1 not settled while held-1's holder runs")
	}
	if _, err := claim.Finish(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-f.decided:
		if d.m.ID != "held-1" || d.d.Outcome != msgx.Duplicate {
			t.Fatalf("decision %v of %s, want held-1 a duplicate", d.d, d.m.ID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("held-1 not settled once its holder succeeded")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if dead := f.dead(t); len(dead) != 1 || dead[0].Header.Get("Idemkit-Orig-Msg-Id") != "free-1" {
		t.Fatalf("%d dead letters, want free-1's alone", len(dead))
	}
}

// pulling waits for a pull request on the consumer: Consume subscribed to its advisory before.
func (f *fixture) pulling(t *testing.T) {
	t.Helper()
	for range 400 {
		info, err := f.cons.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumWaiting > 0 {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatal("no pull request on the consumer within 10s")
}
