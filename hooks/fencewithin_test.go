package hooks_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// TestReconcilerDoesNotFenceAnOldClaim: a record left PROCESSING for longer than DTM keeps finished
// transactions (its Redis store drops one a day after it ends) may be that of a transaction that ran;
// the manager answering "never heard of it" is then no evidence that it did not. Fencing and failing
// it would let the key's next call run the business again, so the reconciler reports it and leaves
// it PROCESSING. Within FenceWithin it is fenced and failed as before.
func TestReconcilerDoesNotFenceAnOldClaim(t *testing.T) {
	for _, tc := range []struct {
		name        string
		within, age time.Duration
		fence       bool
	}{
		{"OlderThanTheDefault", 0, 13 * time.Hour, false},
		{"WithinTheDefault", 0, 11 * time.Hour, true},
		{"WithinARaisedBound", 48 * time.Hour, 30 * time.Hour, true},
		{"OlderThanALoweredBound", time.Minute, 2 * time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			txn, _, err := b.lc.Begin(ctxb, "saga", "g-old", call("k"))
			if err != nil {
				t.Fatal(err)
			}
			b.lc.Detach(ctxb, txn)
			b.clock.Advance(tc.age)
			before := len(b.j.list()) // the Before hook's line
			var logs strings.Builder
			var seen []hooks.ReconcileEvent
			m := &fakeManager{statuses: map[string]txstatus.Status{}}
			r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, Manager: m, FenceWithin: tc.within,
				Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
				Observe: func(_ context.Context, e *hooks.ReconcileEvent) { seen = append(seen, *e) }}
			n, err := r.RunOnce(ctxb, b.clock.Now(), 10)
			rec := b.status(t, "k")
			if tc.fence {
				if n != 1 || err != nil || len(m.fenced) != 1 || rec.Status != idemkit.StatusFailed {
					t.Fatalf("RunOnce = %d, %v; fenced %q; record %s", n, err, m.fenced, rec.Status)
				}
				return
			}
			if n != 0 || err == nil || !strings.Contains(err.Error(), "g-old") || !strings.Contains(err.Error(), "not fenced") {
				t.Fatalf("RunOnce = %d, %v; want 0 and an error naming the gid", n, err)
			}
			// The operator it sends to idemctl must be told to force: release refuses a claim with a gid.
			if !strings.Contains(err.Error(), "idemctl release --force") {
				t.Fatalf("RunOnce error %q does not give the release that works on a claim with a gid", err)
			}
			if len(m.fenced) != 0 || rec.Status != idemkit.StatusProcessing || len(b.j.list()) != before {
				t.Fatalf("fenced %q, record %s, hooks %q: want nothing done", m.fenced, rec.Status, b.j.list()[before:])
			}
			if len(seen) != 1 || seen[0].Fenced || seen[0].Settled || seen[0].Err == nil {
				t.Fatalf("events %+v", seen)
			}
			if !strings.Contains(logs.String(), "level=ERROR") {
				t.Fatalf("log: %s", logs.String())
			}
			// The duplicate's answer: in flight, never a run of the business.
			if _, err := b.g.Do(ctxb, call("k"), func(context.Context) ([]byte, error) {
				t.Fatal("the business ran again")
				return nil, nil
			}); err == nil {
				t.Fatal("a duplicate of the pending call got no error")
			}
		})
	}
	t.Run("Negative", func(t *testing.T) {
		b := setup(t)
		r := &hooks.Reconciler{Lifecycle: b.lc, Scopes: []string{"create-order"}, Manager: &fakeManager{}, FenceWithin: -time.Second}
		if _, err := r.RunOnce(ctxb, b.clock.Now(), 10); err == nil || !strings.Contains(err.Error(), "negative") {
			t.Fatalf("RunOnce = %v", err)
		}
	})
}
