package natsjs_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// TestDeadLetterOfAReplayWithoutIDStaysPoison: a message published without a Nats-Msg-Id is dead-
// lettered Poison, and its dead letter published back is Poison again. That second dead letter
// carried the first one's own Nats-Msg-Id renamed Idemkit-Orig-Msg-Id, the header a replay is keyed
// by: published back in turn, the message ran under an id it never had — and every further round of
// replays ran it again, under another.
func TestDeadLetterOfAReplayWithoutIDStaysPoison(t *testing.T) {
	f := setup(t, nil)
	f.publish(t, "", "") // no Nats-Msg-Id: poison
	opts := &natsjs.Options{DeadLetterSubject: f.dlq}
	for round := 1; round <= 3; round++ {
		got := f.run(t, 1, opts)
		if got[0].d.Outcome != msgx.Poison || got[0].m.ID != "" {
			t.Fatalf("round %d: message %q handled as %s, want poison without an id", round, got[0].m.ID, got[0].d)
		}
		dead := f.dead(t)
		if len(dead) != round {
			t.Fatalf("round %d: %d dead letters, want %d", round, len(dead), round)
		}
		last := dead[len(dead)-1]
		if id := last.Header.Get(natsjs.HeaderOriginalPrefix + "Msg-Id"); id != "" {
			t.Errorf("round %d: the dead letter of a message without an id names %s=%q as the message's id", round, natsjs.HeaderOriginalPrefix+"Msg-Id", id)
		}
		m := nats.NewMsg(f.stream + ".orders") // published back as it is
		m.Header, m.Data = last.Header, last.Data
		if _, err := f.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, n := range f.runs {
		t.Errorf("the handler ran %d time(s) for %q, a message without an id", n, id)
	}
}
