package idemkit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestDuplicateEventNamesTheMark: a Mark-mode duplicate reports the mark it met (its status and
// fence) whether the mark came from the Locker's cache or from the Store; before, one read from the
// Store reported status "" and fence 0, so idemkit.calls counted the same duplicates under two status
// labels depending on the cache.
func TestDuplicateEventNamesTheMark(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		locker idemkit.Locker
	}{{"store", nil}, {"cache", memory.NewLocker(nil)}} {
		t.Run(tc.name, func(t *testing.T) {
			obs := &eventRecorder{}
			g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Observer: obs, Locker: tc.locker})
			if err != nil {
				t.Fatal(err)
			}
			rejected := idemkit.Permanent(errors.New("no"))
			for _, c := range []struct {
				key  string
				err  error
				want idemkit.Status
			}{{"ok", nil, idemkit.StatusSucceeded}, {"rejected", rejected, idemkit.StatusRejected}} {
				call := idemkit.Call{Scope: "s", Key: c.key}
				_ = g.Mark(ctx, call, func(context.Context) error { return c.err })
				if err := g.Mark(ctx, call, func(context.Context) error { return nil }); !errors.Is(err, idemkit.ErrDuplicate) {
					t.Fatalf("%s: duplicate: %v", c.key, err)
				}
				ev := obs.events[len(obs.events)-1]
				if ev.Outcome != idemkit.OutcomeDuplicate || ev.Status != c.want || ev.Fence != 1 {
					t.Fatalf("%s: duplicate's event: outcome %s, status %q, fence %d; want duplicate, %s, 1 (cached %v)",
						c.key, ev.Outcome, ev.Status, ev.Fence, c.want, ev.Cached)
				}
			}
		})
	}
}
