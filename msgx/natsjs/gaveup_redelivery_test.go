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

// TestGaveUpNotDeadLetteredWaitsItsBackoff: a message that gave up (MaxAttempts) but whose dead
// letter could not be published (no stream captures the subject, the stream is down) is
// redelivered rather than lost — and the redelivery runs the handler again, its record being
// FAILED. That redelivery came after 1s whatever the retry policy said, so a failing handler ran
// every second without end; it now waits the attempt's backoff, as a retry does.
func TestGaveUpNotDeadLetteredWaitsItsBackoff(t *testing.T) {
	f := setup(t, &msgx.Options{RetryDelay: time.Minute, MaxAttempts: 1})
	f.publish(t, "fail-1", "")
	var runs atomic.Int32
	h := f.mg.Execute(func(context.Context, *msgx.Message) error {
		runs.Add(1)
		return errFlaky
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
	defer cancel()
	err := natsjs.Consume(ctx, f.js, f.cons, h, &natsjs.Options{DeadLetterSubject: testsvc.Name("nostream_") + ".dead", PublishTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times while its message waited a redelivery a minute away", n)
	}
}
