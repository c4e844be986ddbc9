package natsjs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// TestDeadLetterSubjectMustBePublishable: a DeadLetterSubject no message can be published to —
// whitespace in it, an empty token ("DLQ..dead", "DLQ.dead.") — was accepted, and every dead
// letter's publish then failed: rejected and poison messages were never dead-lettered, only
// redelivered without end, with a warning in the log. Consume refuses it now, before pulling
// anything.
func TestDeadLetterSubjectMustBePublishable(t *testing.T) {
	f := setup(t, nil)
	f.publish(t, "perm-1", "perm")
	for _, subj := range []string{f.dlqName + ".dead letters", f.dlqName + "..dead", f.dlqName + ".dead.",
		"." + f.dlqName + ".dead", f.dlqName + ".dead\t", f.dlqName + ".dead\n"} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var decisions atomic.Int32
		err := natsjs.Consume(ctx, f.js, f.cons, f.handler(), &natsjs.Options{DeadLetterSubject: subj,
			Observe: func(*msgx.Message, msgx.Decision) { decisions.Add(1) }})
		cancel()
		if err == nil || decisions.Load() != 0 {
			t.Errorf("DeadLetterSubject %q: Consume returned %v after %d decisions, want an error before any", subj, err, decisions.Load())
		}
	}
	// The message is still there, and dead-lettered once to a subject it can be published to.
	got := f.run(t, 1, &natsjs.Options{DeadLetterSubject: f.dlq})
	if got[0].d.Outcome != msgx.Rejected {
		t.Fatalf("decision %v, want rejected", got[0].d)
	}
	f.drained(t)
	if n := len(f.dead(t)); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
}
