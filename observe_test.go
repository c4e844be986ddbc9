package idemkit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// tickingClock advances by a millisecond at every reading.
type tickingClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *tickingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

// eventRecorder keeps every event.
type eventRecorder struct {
	mu     sync.Mutex
	events []idemkit.Event
}

func (r *eventRecorder) Start(ctx context.Context, _ idemkit.Mode, _ string) (context.Context, func(*idemkit.Event)) {
	return ctx, func(ev *idemkit.Event) {
		r.mu.Lock()
		r.events = append(r.events, *ev)
		r.mu.Unlock()
	}
}

// TestEventClaimDuration: a call that gets a claim (new key or takeover) reports how long that took,
// from its start; a call that gets none reports 0.
func TestEventClaimDuration(t *testing.T) {
	clock := &tickingClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	obs := &eventRecorder{}
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Observer: obs, Now: clock.Now, Locker: memory.NewLocker(nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fn := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	for range 2 {
		if _, err := g.Do(ctx, idemkit.Call{Scope: "s", Key: "k"}, fn); err != nil {
			t.Fatal(err)
		}
	}
	if len(obs.events) != 2 {
		t.Fatalf("%d events", len(obs.events))
	}
	run, replay := obs.events[0], obs.events[1]
	if run.Outcome != idemkit.OutcomeExecuted || run.ClaimDuration <= 0 || run.ClaimDuration >= run.Duration {
		t.Fatalf("executed call: claim %s of %s", run.ClaimDuration, run.Duration)
	}
	if replay.Outcome != idemkit.OutcomeReplayed || replay.ClaimDuration != 0 {
		t.Fatalf("replayed call: %+v", replay)
	}
}

// TestEventClaimDurationTx: a Tx-mode call that gets its claim (the lock and the record's read,
// before its function runs) reports how long that took, as Execute mode does; before, it reported 0,
// so idemkit.claim.duration held only zeros for mode "tx".
func TestEventClaimDurationTx(t *testing.T) {
	clock := &tickingClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	obs := &eventRecorder{}
	st := memory.NewStore()
	g, err := idemkit.New(st, &idemkit.Options{Observer: obs, Now: clock.Now, Locker: memory.NewLocker(nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fn := func(context.Context, idemkit.TxStore) ([]byte, error) { return []byte("v"), nil }
	if _, err := g.Tx(ctx, st, idemkit.Call{Scope: "s", Key: "k"}, fn); err != nil {
		t.Fatal(err)
	}
	if _, err := g.DoTx(ctx, st, idemkit.Call{Scope: "s", Key: "k2"}, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	if len(obs.events) != 2 {
		t.Fatalf("%d events", len(obs.events))
	}
	for _, run := range obs.events {
		if run.Outcome != idemkit.OutcomeExecuted || run.ClaimDuration <= 0 || run.ClaimDuration >= run.Duration {
			t.Errorf("executed %s call: claim %s of %s", run.Mode, run.ClaimDuration, run.Duration)
		}
	}
}
