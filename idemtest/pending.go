package idemtest

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// runPending checks [idemkit.PendingLister]: only PROCESSING records with a GID of the asked scopes
// whose lease ran out, oldest lease first, expired or not; and that the sweeper never deletes such a
// record, since its transaction is not settled.
func runPending(t *testing.T, newStore NewStore) {
	s := newStore(t)
	pl, ok := s.(idemkit.PendingLister)
	if !ok {
		t.Skip("the Store does not implement idemkit.PendingLister")
	}
	now := time.Date(2031, 3, 1, 8, 0, 0, 0, time.UTC)
	put := func(scope, key string, mod func(r *idemkit.Record)) *idemkit.Record {
		t.Helper()
		r := sample(now.Add(-time.Hour), scope, key)
		mod(r)
		must(t, s.Insert(ctxb, r))
		return r
	}
	lapsed := func(d time.Duration) func(r *idemkit.Record) {
		return func(r *idemkit.Record) { r.LeaseUntil = now.Add(-d) }
	}
	older := put("pend", "older", lapsed(time.Hour))
	newer := put("pend", "newer", lapsed(0))
	expired := put("pend", "expired", func(r *idemkit.Record) { r.LeaseUntil, r.ExpiresAt = now.Add(-30*time.Minute), now.Add(-time.Minute) })
	put("pend", "leased", func(r *idemkit.Record) { r.LeaseUntil = now.Add(time.Second) })
	put("pend", "nogid", func(r *idemkit.Record) { r.GID, r.LeaseUntil = "", now.Add(-time.Hour) })
	put("pend", "done", func(r *idemkit.Record) { r.Status, r.LeaseUntil = idemkit.StatusSucceeded, now.Add(-time.Hour) })
	other := put("pend-other", "k", lapsed(2*time.Hour))

	got, err := pl.Pending(ctxb, idemkit.PendingQuery{Scopes: []string{"pend"}, Now: now, Limit: 10})
	must(t, err)
	if len(got) != 3 {
		t.Fatalf("Pending returned %d records, want 3 (older, expired, newer): %+v", len(got), got)
	}
	for i, want := range []*idemkit.Record{older, expired, newer} {
		RequireSameRecord(t, want, got[i])
	}
	got, err = pl.Pending(ctxb, idemkit.PendingQuery{Scopes: []string{"pend"}, Now: now, Limit: 1})
	must(t, err)
	if len(got) != 1 || got[0].Key != "older" {
		t.Fatalf("Pending(limit 1) = %+v, want the oldest lease", got)
	}
	got, err = pl.Pending(ctxb, idemkit.PendingQuery{Scopes: []string{"pend-other", "pend"}, Now: now, Limit: 10})
	must(t, err)
	if len(got) != 4 {
		t.Fatalf("Pending(both scopes) returned %d records, want 4", len(got))
	}
	RequireSameRecord(t, other, got[0])
	// Paging: After goes on past the records returned, in the listing's order (lease, scope, key).
	tied := put("pend", "tied", lapsed(time.Hour)) // the same lease as older, after it by key
	var paged []*idemkit.Record
	var after *idemkit.Record
	for range 10 {
		got, err := pl.Pending(ctxb, idemkit.PendingQuery{Scopes: []string{"pend"}, Now: now, Limit: 1, After: after})
		must(t, err)
		if len(got) == 0 {
			break
		}
		paged = append(paged, got...)
		after = got[0]
	}
	if len(paged) != 4 {
		t.Fatalf("paging through Pending returned %d records, want 4 (older, tied, expired, newer): %+v", len(paged), paged)
	}
	for i, want := range []*idemkit.Record{older, tied, expired, newer} {
		RequireSameRecord(t, want, paged[i])
	}
	for _, q := range []idemkit.PendingQuery{{Now: now, Limit: 10}, {Scopes: []string{"pend"}, Now: now}} {
		if got, err := pl.Pending(ctxb, q); err != nil || len(got) != 0 {
			t.Fatalf("Pending(%+v) = %+v, %v; want nothing", q, got, err)
		}
	}

	if sw, ok := s.(Sweepable); ok {
		if _, err := sw.DeleteExpired(ctxb, now, 100); err != nil {
			t.Fatal(err)
		}
		rec, err := s.Get(ctxb, "pend", "expired")
		if err != nil {
			t.Fatalf("the sweeper deleted a record whose transaction is not settled: %v", err)
		}
		RequireSameRecord(t, expired, rec)
	}
}
