package msgx_test

import (
	"math"
	"testing"
	"time"

	"github.com/idemkit/idemkit/msgx"
)

// TestBackoffDoesNotOverflow: the retry delay doubles per attempt up to MaxRetryDelay, which New
// accepts up to the longest Duration ("no cap"). Doubling past half of it overflowed: from the 35th
// attempt on (RetryDelay 1s) the delay came out negative, or zero, and the broker was asked to
// redeliver at once, attempt after attempt. It stays at the cap.
func TestBackoffDoesNotOverflow(t *testing.T) {
	const noCap = time.Duration(math.MaxInt64)
	f := newExec(t, nil, &msgx.Options{RetryDelay: time.Second, MaxRetryDelay: noCap})
	prev := time.Duration(0)
	for attempt := 1; attempt <= 80; attempt++ {
		m := msg("r1")
		m.Attempt = attempt
		d := f.handle(m, errBoom)
		want(t, d, msgx.Retry, msgx.Failed)
		if d.Delay < prev || d.Delay <= 0 {
			t.Fatalf("attempt %d: a delay of %s after %s; want it to grow up to %s", attempt, d.Delay, prev, noCap)
		}
		prev = d.Delay
	}
}
