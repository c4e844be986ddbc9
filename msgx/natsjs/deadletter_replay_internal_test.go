package natsjs

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testsvc/testbroker"
	"github.com/idemkit/idemkit/msgx"
)

// TestDeadLetterOfAReplayKeepsTheOriginalIDFirst: a dead letter published back and dead-lettered
// again (its record still REJECTED, say) has two ids to keep under Idemkit-Orig-Msg-Id: the
// original's, under that name already, and the first dead letter's own Nats-Msg-Id, renamed. They
// were appended in the order of the header map's iteration, so at random the first dead letter's
// id came first — the key of the next replay, one never seen, which ran the handler again.
func TestDeadLetterOfAReplayKeepsTheOriginalIDFirst(t *testing.T) {
	_, js := testbroker.NATS(t)
	s := &settler{js: js, opts: &Options{DeadLetterSubject: "DLQ.dead"}, queue: "ORDERS/billing"}
	for range 200 {
		m := &msgx.Message{ID: "order-1", Data: []byte("order"), Header: msgx.Header{
			"Idemkit-Orig-Msg-Id": {"order-1"}, "Nats-Msg-Id": {"ORDERS/billing:1:1:rejected"}, "Idemkit-Outcome": {"rejected"},
			"Idemkit-Queue": {"ORDERS/billing"}, "Idemkit-Stream-Seq": {"1"}, "Kind": {"perm"},
		}}
		out, _, _ := s.deadLetterOf(m, &place{seq: 2, stored: time.Unix(0, 2)}, msgx.Decision{Outcome: msgx.Rejected})
		ids := out.Header.Values(HeaderOriginalPrefix + "Msg-Id")
		if len(ids) != 2 || ids[0] != "order-1" {
			t.Fatalf("the dead letter of a replayed dead letter keeps Idemkit-Orig-Msg-Id %q, want the original's id first", ids)
		}
		if got := messageID(out.Header, "ORDERS/billing"); got != "order-1" {
			t.Fatalf("its id is %q, want order-1", got)
		}
		if got := messageID(out.Header, "DLQ/alerts"); got != out.Header.Get("Nats-Msg-Id") {
			t.Fatalf("its id on a consumer of the dead letters is %q, want its own Nats-Msg-Id", got)
		}
	}
}
