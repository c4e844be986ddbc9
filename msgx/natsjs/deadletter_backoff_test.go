package natsjs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/msgx/natsjs"
)

// TestDeadLetterFailureWaitsTheBackoff: a message to dead-letter — rejected by its handler, or
// poison — whose dead letter cannot be published (no stream captures the subject, the stream is
// down) is redelivered rather than lost. That redelivery came every second whatever the retry
// policy said: the record answered it Rejected again, the publish failed again, and the message
// went round without end, once a second. It now waits the attempt's backoff, as a retry does.
func TestDeadLetterFailureWaitsTheBackoff(t *testing.T) {
	for _, kind := range []string{"perm", "poison"} {
		t.Run(kind, func(t *testing.T) {
			f := setup(t, &msgx.Options{RetryDelay: time.Minute})
			id := kind + "-1"
			if kind == "poison" {
				id = "" // no Nats-Msg-Id
			}
			f.publish(t, id, kind)
			var decisions atomic.Int32
			ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
			defer cancel()
			err := natsjs.Consume(ctx, f.js, f.cons, f.handler(), &natsjs.Options{
				DeadLetterSubject: testsvc.Name("nostream_") + ".dead", PublishTimeout: time.Second,
				Observe: func(*msgx.Message, msgx.Decision) { decisions.Add(1) },
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := decisions.Load(); n != 1 {
				t.Fatalf("%d deliveries in 3.5s of a message whose redelivery is a minute away", n)
			}
		})
	}
}
