package msgx_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/msgx"
)

// TestRecordedJudgesByTheGuardsClock: Recorded judged leases and expiry by time.Now, not by the clock
// the Guard's records are written and judged by (idemkit.Options.Now), so its decision could differ
// from what a delivery meets: a claim whose lease ran out by the Guard's clock, which the next delivery
// takes over, was answered in flight (and a record expired by that clock replayed), or the other way
// round for a Guard whose clock runs behind.
func TestRecordedJudgesByTheGuardsClock(t *testing.T) {
	ctx := context.Background()
	clk := idemtest.NewClock() // 2030: far from time.Now
	f := newExec(t, &idemkit.Options{Lease: time.Minute, TTL: time.Hour, Now: clk.Now}, nil)
	held := msg("held")
	cl, _, err := f.guard.Begin(ctx, idemkit.Call{Scope: held.Queue, Key: held.ID})
	if err != nil || cl == nil {
		t.Fatalf("Begin: %v", err)
	}
	want(t, f.mg.Recorded(ctx, held), msgx.Retry, msgx.InFlight)
	clk.Advance(2 * time.Minute) // the claim's lease ran out: the next delivery takes it over
	if d := f.mg.Recorded(ctx, held); d.Outcome != msgx.Failed || d.Action != msgx.Retry {
		t.Errorf("a claim whose lease ran out by the Guard's clock: %v, want a retry (Failed)", d)
	}

	want(t, f.handle(msg("ok"), nil), msgx.Ack, msgx.Processed)
	want(t, f.mg.Recorded(ctx, msg("ok")), msgx.Ack, msgx.Duplicate)
	clk.Advance(2 * time.Hour) // expired by the Guard's clock: the next delivery runs it again
	if d := f.mg.Recorded(ctx, msg("ok")); d.Outcome != msgx.Failed || d.Action != msgx.Retry {
		t.Errorf("a record expired by the Guard's clock: %v, want a retry (Failed)", d)
	}
}
