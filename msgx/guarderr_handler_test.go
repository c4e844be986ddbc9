package msgx_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
)

// TestHandlerErrorWrappingAGuardSentinelIsItsOutcome: a handler's own error that wraps one of
// idemkit's "not recorded" errors (ErrStoreUnavailable, ErrLockUnavailable, ErrFenced) — a handler
// calling another idemkit-guarded step and returning its error — was taken for a failure to record
// this delivery's outcome, although the Guard had recorded it (FAILED, REJECTED): a retryable one
// never gave up at Options.MaxAttempts (retried without end), a permanent one was retried once
// before its replay dead-lettered it. The handler's error, recorded, is the outcome.
func TestHandlerErrorWrappingAGuardSentinelIsItsOutcome(t *testing.T) {
	for _, sentinel := range []error{idemkit.ErrStoreUnavailable, idemkit.ErrLockUnavailable, idemkit.ErrFenced} {
		t.Run(sentinel.Error(), func(t *testing.T) {
			f := newExec(t, nil, &msgx.Options{MaxAttempts: 2})
			inner := fmt.Errorf("reserving stock: %w", sentinel)
			m := msg("wrap-retryable")
			want(t, f.handle(m, inner), msgx.Retry, msgx.Failed)
			m.Attempt = 2
			want(t, f.handle(m, inner), msgx.DeadLetter, msgx.GaveUp)

			d := f.handle(msg("wrap-permanent"), idemkit.Permanent(inner))
			want(t, d, msgx.DeadLetter, msgx.Rejected)
			if d.Replayed {
				t.Fatalf("decision %v replayed, want this delivery's rejection", d)
			}
			if n := f.runs.Load(); n != 3 {
				t.Fatalf("handler ran %d times, want 3", n)
			}
		})
	}
}

// The same in Tx mode: the handler's writes roll back and its error is the outcome.
func TestTxHandlerErrorWrappingAGuardSentinelIsItsOutcome(t *testing.T) {
	f := newTx(t, testsvc.MySQL(t, nil), nil, &msgx.Options{MaxAttempts: 2})
	ctx := context.Background()
	inner := fmt.Errorf("reserving stock: %w", idemkit.ErrStoreUnavailable)
	m := msg("tx-wrap-retryable")
	m.Attempt = 2
	want(t, f.handler(inner)(ctx, m), msgx.DeadLetter, msgx.GaveUp)
	d := f.handler(idemkit.Permanent(inner))(ctx, msg("tx-wrap-permanent"))
	want(t, d, msgx.DeadLetter, msgx.Rejected)
	if s := f.status(t, "tx-wrap-permanent"); s != idemkit.StatusRejected || d.Replayed {
		t.Fatalf("record %q, replayed %v; want REJECTED, this delivery's own rejection", s, d.Replayed)
	}
	if n := f.effectsOf(t, "tx-wrap-retryable") + f.effectsOf(t, "tx-wrap-permanent"); n != 0 {
		t.Fatalf("%d effects, want none", n)
	}
}
