package msgx_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/msgx"
)

// Recorded answers from the record alone, never running anything: a message dropped by its broker
// without a decision (msgx/natsjs) is settled as its record says.
func TestRecordedAnswersFromTheRecord(t *testing.T) {
	f := newExec(t, nil, &msgx.Options{Fingerprint: msgx.DataFingerprint})
	ctx := context.Background()
	want(t, f.mg.Recorded(ctx, msg("none")), msgx.Retry, msgx.Failed)
	want(t, f.handle(msg("ok"), nil), msgx.Ack, msgx.Processed)
	d := f.mg.Recorded(ctx, msg("ok"))
	want(t, d, msgx.Ack, msgx.Duplicate)
	if !d.Replayed {
		t.Errorf("decision %v, want replayed", d)
	}
	want(t, f.handle(msg("bad"), idemkit.Permanent(errBoom)), msgx.DeadLetter, msgx.Rejected)
	if d := f.mg.Recorded(ctx, msg("bad")); d.Outcome != msgx.Rejected || !errors.Is(d.Err, idemkit.ErrRejected) || !d.Replayed {
		t.Errorf("rejected key: %v", d)
	}
	want(t, f.handle(msg("flaky"), errBoom), msgx.Retry, msgx.Failed)
	want(t, f.mg.Recorded(ctx, msg("flaky")), msgx.Retry, msgx.Failed)
	want(t, f.mg.Recorded(ctx, msg("")), msgx.DeadLetter, msgx.Poison)
	other := msg("ok")
	other.Data = []byte(`{"id":2}`)
	if d := f.mg.Recorded(ctx, other); d.Outcome != msgx.Poison || !errors.Is(d.Err, idemkit.ErrPayloadMismatch) {
		t.Errorf("key reused with another payload: %v", d)
	}
	held := msg("held")
	if _, _, err := f.guard.Begin(ctx, idemkit.Call{Scope: held.Queue, Key: held.ID, Fingerprint: msgx.DataFingerprint(held)}); err != nil {
		t.Fatal(err)
	}
	if d := f.mg.Recorded(ctx, held); d.Outcome != msgx.InFlight || d.Action != msgx.Retry || d.Delay <= 0 {
		t.Errorf("held key: %v, want in flight for the rest of its lease", d)
	}
	if n := f.runs.Load(); n != 3 {
		t.Errorf("handler ran %d times, want 3 (Recorded runs nothing)", n)
	}

	acking := newExec(t, nil, &msgx.Options{OnReject: msgx.AckRejected})
	want(t, acking.handle(msg("bad"), idemkit.Permanent(errBoom)), msgx.Ack, msgx.Rejected)
	want(t, acking.mg.Recorded(ctx, msg("bad")), msgx.Ack, msgx.Rejected)
}
