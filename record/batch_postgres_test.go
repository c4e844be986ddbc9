package record

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/sqlcount"
)

// TestBatchedFinishesPostgres: on PostgreSQL, finishes that come while one is in flight leave together
// as one UPDATE, and each gets what it would alone: written, unchanged but matching, or fenced (another
// owner). A key finished twice in the batch (its lease renewed while its claim finishes) is written as
// the two would be one after the other: the finish is never reported written without being written.
func TestBatchedFinishesPostgres(t *testing.T) {
	db, n := countedDB(t, backends[1], nil)
	s := newTable(t, db)
	if s.finishes == nil {
		t.Fatal("no group commit of finishes on PostgreSQL")
	}
	recs := map[string]*idemkit.Record{}
	for _, k := range []string{"held", "a", "b", "same", "other", "renewed"} {
		recs[k] = claimRec(k, "owner-"+k)
		must(t, s.Insert(ctxb, recs[k]))
	}
	finished := func(k string) *idemkit.Record {
		r := *recs[k]
		r.Status, r.Response, r.Error, r.LeaseUntil, r.UpdatedAt = idemkit.StatusSucceeded, []byte("result of "+k), "é", time.Time{}, time.Now()
		return &r
	}
	release := holdRow(t, db, s, "held", false)
	first := make(chan error, 1)
	go func() { first <- s.Update(ctxb, finished("held"), recs["held"].Version()) }()
	waitAtServer(t, db, s)
	// "other" was taken over (its lease ran out, say): its first claim's finish is fenced.
	taken := *recs["other"]
	taken.Fence, taken.Owner = 2, "new owner"
	must(t, s.Update(ctxb, &taken, recs["other"].Version()))
	renewal := *recs["renewed"]
	renewal.LeaseUntil = renewal.LeaseUntil.Add(time.Minute)
	writes := []struct {
		rec  *idemkit.Record
		prev idemkit.Version
		want error
	}{
		{finished("a"), recs["a"].Version(), nil},
		{&renewal, recs["renewed"].Version(), nil},
		{finished("b"), recs["b"].Version(), nil},
		{recs["same"], recs["same"].Version(), nil}, // changes nothing, matches
		{finished("renewed"), recs["renewed"].Version(), nil},
		{finished("other"), recs["other"].Version(), idemkit.ErrFenced},
	}
	calls := make([]func() error, len(writes))
	for i, w := range writes {
		calls[i] = func() error { return s.Update(ctxb, w.rec, w.prev) }
	}
	var before sqlcount.Counts
	errs := inBatch(t, s.finishes.Waiting, func() { before = n.Counts(); release(); must(t, <-first) }, calls...)
	for i, w := range writes {
		err := errs[i]
		if w.rec == &renewal {
			// After the finish the renewal is fenced (the claim is no longer PROCESSING); before it,
			// it is written and the finish after it too.
			if err != nil && !errors.Is(err, idemkit.ErrFenced) {
				t.Errorf("renewal: %v", err)
			}
			continue
		}
		if !errors.Is(err, w.want) || (w.want == nil && err != nil) {
			t.Errorf("finish %s: %v, want %v", w.rec.Key, err, w.want)
		}
	}
	// The held finish, the batch's UPDATE, and the second write of "renewed" alone: 3 (7 alone).
	if d := n.Counts().Sub(before); d.Statements != 3 {
		t.Errorf("6 finishes in a batch: %+v; want 3 statements", d)
	}
	for _, k := range []string{"held", "a", "b", "renewed"} {
		rec, err := s.Get(ctxb, batchScope, k)
		must(t, err)
		if rec.Status != idemkit.StatusSucceeded || string(rec.Response) != "result of "+k || rec.Error != "é" {
			t.Errorf("record %s: %s %q %q", k, rec.Status, rec.Response, rec.Error)
		}
	}
	if rec, err := s.Get(ctxb, batchScope, "other"); err != nil || rec.Owner != "new owner" || rec.Status != idemkit.StatusProcessing {
		t.Errorf("fenced record: %v, %v", rec, err)
	}
}
