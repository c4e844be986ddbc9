package idemkit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
)

// TestFencedFinishEventWroteNothing: a finish refused because another attempt took the record over
// reports no status in its event, since it wrote none; before, it reported the outcome it was refused
// (SUCCEEDED), so idemkit.calls counted a fenced call as a success recorded, beside the takeover's own.
func TestFencedFinishEventWroteNothing(t *testing.T) {
	ctx := context.Background()
	clock := idemtest.NewClock()
	obs := &eventRecorder{}
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Observer: obs, Now: clock.Now, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	call := idemkit.Call{Scope: "s", Key: "k"}
	stalled, _, err := g.Begin(ctx, call)
	if err != nil || stalled == nil {
		t.Fatalf("begin: %v", err)
	}
	clock.Advance(2 * time.Second)
	if _, err := g.Do(ctx, call, func(context.Context) ([]byte, error) { return []byte("new"), nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := stalled.Finish(ctx, []byte("old"), nil); !errors.Is(err, idemkit.ErrFenced) {
		t.Fatalf("stalled finish: %v", err)
	}
	ev := obs.events[len(obs.events)-1]
	if !ev.Fenced || ev.Outcome != idemkit.OutcomeExecuted || ev.Status != "" {
		t.Fatalf("fenced finish's event: fenced %v, outcome %s, status %q; want fenced, executed, no status", ev.Fenced, ev.Outcome, ev.Status)
	}
	if rec, err := g.Get(ctx, "s", "k"); err != nil || string(rec.Response) != "new" || rec.Fence != 2 {
		t.Fatalf("record: %+v %v", rec, err)
	}
}
