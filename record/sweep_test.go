package record

import (
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
)

// sweepFixture inserts records relative to now into a fresh table whose sweeper batches hold 2 ids,
// so that every limit above 2 spans several statements.
type sweepFixture struct {
	t   *testing.T
	s   *Store
	db  *gorm.DB
	now time.Time
	n   int
}

func newSweepFixture(t *testing.T, b backend) *sweepFixture {
	s, db := setup(t, b)
	s.q.batch = 2
	return &sweepFixture{t: t, s: s, db: db, now: time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)}
}

func (f *sweepFixture) put(key string, mod func(r *idemkit.Record)) *idemkit.Record {
	f.t.Helper()
	f.n++
	r := &idemkit.Record{
		Scope: "sweep", Key: key, Status: idemkit.StatusProcessing, Fence: int64(f.n), Owner: "owner-" + key,
		Fingerprint: "fp", Response: []byte("r"), LeaseUntil: f.now.Add(time.Minute), ExpiresAt: f.now.Add(time.Hour),
		CreatedAt: f.now.Add(-time.Hour), UpdatedAt: f.now.Add(-time.Hour),
	}
	mod(r)
	must(f.t, f.s.Insert(ctxb, r))
	return r
}

func (f *sweepFixture) get(key string) (*idemkit.Record, error) { return f.s.Get(ctxb, "sweep", key) }

func (f *sweepFixture) wantCount(name string, got int, err error, want int) {
	f.t.Helper()
	must(f.t, err)
	if got != want {
		f.t.Fatalf("%s = %d, want %d", name, got, want)
	}
}

func TestDeleteExpired(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		f := newSweepFixture(t, b)
		for i := range 7 {
			f.put("expired"+string(rune('a'+i)), func(r *idemkit.Record) {
				r.Status, r.ExpiresAt = idemkit.StatusSucceeded, f.now.Add(-time.Duration(i)*time.Minute) // the first at exactly now
			})
		}
		keep := []*idemkit.Record{
			f.put("live", func(r *idemkit.Record) { r.Status = idemkit.StatusSucceeded }),
			f.put("soon", func(r *idemkit.Record) { r.ExpiresAt = f.now.Add(time.Millisecond) }),
			f.put("never", func(r *idemkit.Record) { r.ExpiresAt = time.Time{} }),
			// Tied to a global transaction nobody settled: never expires, whatever its expiry says.
			f.put("unsettled", func(r *idemkit.Record) {
				r.GID, r.LeaseUntil, r.ExpiresAt = "gid-x", f.now.Add(-time.Hour), f.now.Add(-time.Minute)
			}),
		}
		n, err := f.s.DeleteExpired(ctxb, f.now, 0)
		f.wantCount("DeleteExpired(limit 0)", n, err, 0)
		n, err = f.s.DeleteExpired(ctxb, f.now, 5) // batches of 2, 2, 1
		f.wantCount("DeleteExpired(limit 5)", n, err, 5)
		n, err = f.s.DeleteExpired(ctxb, f.now, 100)
		f.wantCount("DeleteExpired(limit 100)", n, err, 2)
		n, err = f.s.DeleteExpired(ctxb, f.now, 100)
		f.wantCount("DeleteExpired when done", n, err, 0)
		for i := range 7 {
			if _, err := f.get("expired" + string(rune('a'+i))); err != idemkit.ErrNotFound {
				t.Fatalf("expired record %d: %v", i, err)
			}
		}
		for _, r := range keep {
			got, err := f.get(r.Key)
			must(t, err)
			idemtest.RequireSameRecord(t, r, got)
		}
	})
}

func TestRecoverStale(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		f := newSweepFixture(t, b)
		var stale []*idemkit.Record
		for i := range 3 {
			stale = append(stale, f.put("stale"+string(rune('a'+i)), func(r *idemkit.Record) {
				r.LeaseUntil = f.now.Add(-time.Duration(i) * time.Second) // the first at exactly now
			}))
		}
		keep := []*idemkit.Record{
			f.put("gid", func(r *idemkit.Record) { r.LeaseUntil, r.GID = f.now.Add(-time.Second), "gid-1" }),
			f.put("leased", func(r *idemkit.Record) { r.LeaseUntil = f.now.Add(time.Millisecond) }),
			f.put("expired", func(r *idemkit.Record) { r.LeaseUntil, r.ExpiresAt = f.now.Add(-time.Hour), f.now }),
			f.put("succeeded", func(r *idemkit.Record) { r.Status, r.LeaseUntil = idemkit.StatusSucceeded, f.now.Add(-time.Hour) }),
			f.put("failed", func(r *idemkit.Record) { r.Status, r.LeaseUntil = idemkit.StatusFailed, f.now.Add(-time.Hour) }),
		}
		n, err := f.s.RecoverStale(ctxb, f.now, 0)
		f.wantCount("RecoverStale(limit 0)", n, err, 0)
		n, err = f.s.RecoverStale(ctxb, f.now, 100) // batches of 2 and 1
		f.wantCount("RecoverStale", n, err, 3)
		n, err = f.s.RecoverStale(ctxb, f.now, 100)
		f.wantCount("RecoverStale when done", n, err, 0)
		for _, r := range stale {
			got, err := f.get(r.Key)
			must(t, err)
			want := *r
			want.Status, want.Fence, want.Owner, want.Error, want.UpdatedAt = idemkit.StatusFailed, r.Fence+1, "", RecoveredError, f.now
			idemtest.RequireSameRecord(t, &want, got)
			done := *r
			done.Status = idemkit.StatusSucceeded
			if err := f.s.Update(ctxb, &done, r.Version()); err != idemkit.ErrFenced {
				t.Fatalf("stalled holder's finish after recovery = %v, want ErrFenced", err)
			}
		}
		for _, r := range keep {
			got, err := f.get(r.Key)
			must(t, err)
			idemtest.RequireSameRecord(t, r, got)
		}
	})
}

func TestPending(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		f := newSweepFixture(t, b)
		newer := f.put("newer", func(r *idemkit.Record) { r.GID, r.BranchID, r.LeaseUntil = "gid-b", "01", f.now })
		older := f.put("older", func(r *idemkit.Record) { r.GID, r.LeaseUntil = "gid-a", f.now.Add(-time.Hour) })
		f.put("leased", func(r *idemkit.Record) { r.GID = "gid-c" })
		f.put("nogid", func(r *idemkit.Record) { r.LeaseUntil = f.now.Add(-time.Hour) })
		// Past its expiry but unsettled: still the reconciler's to settle (issue 11, item 10a).
		expired := f.put("expired", func(r *idemkit.Record) {
			r.GID, r.LeaseUntil, r.ExpiresAt = "gid-d", f.now.Add(-30*time.Minute), f.now
		})
		f.put("done", func(r *idemkit.Record) {
			r.GID, r.Status, r.LeaseUntil = "gid-e", idemkit.StatusSucceeded, f.now.Add(-time.Hour)
		})
		other := &idemkit.Record{Scope: "other", Key: "k", Status: idemkit.StatusProcessing, Fence: 1, Owner: "o",
			GID: "gid-f", LeaseUntil: f.now.Add(-2 * time.Hour), ExpiresAt: f.now.Add(time.Hour)}
		must(t, f.s.Insert(ctxb, other))

		got, err := f.pending(f.s, 10)
		must(t, err)
		if len(got) != 3 {
			t.Fatalf("Pending returned %d records, want 3: %+v", len(got), got)
		}
		idemtest.RequireSameRecord(t, older, got[0])
		idemtest.RequireSameRecord(t, expired, got[1])
		idemtest.RequireSameRecord(t, newer, got[2])
		got, err = f.pending(f.s, 1)
		must(t, err)
		if len(got) != 1 || got[0].Key != "older" {
			t.Fatalf("Pending(limit 1) = %+v, want the oldest lease", got)
		}
		if got, err := f.pending(f.s, 0); err != nil || got != nil {
			t.Fatalf("Pending(limit 0) = %v, %v", got, err)
		}
		// Another scope's records are another reconciler's (issue 11, item 10b).
		got, err = f.s.Pending(ctxb, idemkit.PendingQuery{Scopes: []string{"other"}, Now: f.now, Limit: 10})
		must(t, err)
		if len(got) != 1 || got[0].Scope != "other" {
			t.Fatalf("Pending(other) = %+v, want only the other scope's record", got)
		}
		got, err = f.s.Pending(ctxb, idemkit.PendingQuery{Scopes: []string{"sweep", "other"}, Now: f.now, Limit: 10})
		must(t, err)
		if len(got) != 4 || got[0].Scope != "other" {
			t.Fatalf("Pending(both) = %+v, want 4 records, the other scope's first", got)
		}
		if got, err := f.s.Pending(ctxb, idemkit.PendingQuery{Now: f.now, Limit: 10}); err != nil || got != nil {
			t.Fatalf("Pending(no scopes) = %v, %v; want nothing", got, err)
		}
	})
}

func (f *sweepFixture) pending(s *Store, limit int) ([]*idemkit.Record, error) {
	return s.Pending(ctxb, idemkit.PendingQuery{Scopes: []string{"sweep"}, Now: f.now, Limit: limit})
}

// TestSweepInTransaction runs the hooks on transaction-bound Stores, gorm and database/sql (where the
// per-call id lists are rewritten to $n on PostgreSQL).
func TestSweepInTransaction(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		f := newSweepFixture(t, b)
		for i := range 3 {
			f.put("exp"+string(rune('a'+i)), func(r *idemkit.Record) { r.Status, r.ExpiresAt = idemkit.StatusSucceeded, f.now.Add(-time.Minute) })
			f.put("stale"+string(rune('a'+i)), func(r *idemkit.Record) { r.LeaseUntil = f.now.Add(-time.Minute) })
			f.put("pend"+string(rune('a'+i)), func(r *idemkit.Record) { r.LeaseUntil, r.GID = f.now.Add(-time.Minute), "g" })
		}
		must(t, f.db.Transaction(func(tx *gorm.DB) error {
			st := f.s.WithTx(tx)
			n, err := st.DeleteExpired(ctxb, f.now, 2)
			f.wantCount("gorm tx DeleteExpired", n, err, 2)
			n, err = st.RecoverStale(ctxb, f.now, 2)
			f.wantCount("gorm tx RecoverStale", n, err, 2)
			p, err := f.pending(st, 10)
			f.wantCount("gorm tx Pending", len(p), err, 3)
			return nil
		}))
		sqlDB, err := f.db.DB()
		must(t, err)
		tx, err := sqlDB.Begin()
		must(t, err)
		st := f.s.WithSQLTx(tx)
		n, err := st.DeleteExpired(ctxb, f.now, 10)
		f.wantCount("sql.Tx DeleteExpired", n, err, 1)
		n, err = st.RecoverStale(ctxb, f.now, 10)
		f.wantCount("sql.Tx RecoverStale", n, err, 1)
		p, err := f.pending(st, 10)
		f.wantCount("sql.Tx Pending", len(p), err, 3)
		must(t, tx.Commit())
		n, err = f.s.DeleteExpired(ctxb, f.now, 10)
		f.wantCount("DeleteExpired after both", n, err, 0)
		n, err = f.s.RecoverStale(ctxb, f.now, 10)
		f.wantCount("RecoverStale after both", n, err, 0)
	})
}

// TestRecoverStaleClaims: RecoverStaleClaims recovers what RecoverStale recovers, in batches up to its
// limit, and returns each recovered claim as it was (its fence and owner, the holder's lock token); a
// live claim, one tied to a global transaction and a finished record are left alone and not returned.
func TestRecoverStaleClaims(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		f := newSweepFixture(t, b)
		stale := map[string]*idemkit.Record{}
		for _, k := range []string{"s1", "s2", "s3"} {
			stale[k] = f.put(k, func(r *idemkit.Record) { r.LeaseUntil = f.now.Add(-time.Second) })
		}
		f.put("live", func(r *idemkit.Record) {})
		f.put("gid", func(r *idemkit.Record) { r.LeaseUntil, r.GID = f.now.Add(-time.Second), "g" })
		f.put("done", func(r *idemkit.Record) { r.Status, r.LeaseUntil = idemkit.StatusSucceeded, f.now.Add(-time.Second) })

		got := map[string]*idemkit.Record{}
		for _, limit := range []int{1, 10} {
			recs, err := f.s.RecoverStaleClaims(ctxb, f.now, limit)
			must(t, err)
			if want := min(limit, 3-len(got)); len(recs) != want {
				t.Fatalf("RecoverStaleClaims(limit %d) = %d claims, want %d", limit, len(recs), want)
			}
			for _, r := range recs {
				got[r.Key] = r
			}
		}
		for k, want := range stale {
			r := got[k]
			if r == nil || r.Scope != "sweep" || r.Fence != want.Fence || r.Owner != want.Owner {
				t.Fatalf("claim %s returned as %+v, want fence %d owner %s", k, r, want.Fence, want.Owner)
			}
			cur, err := f.get(k)
			must(t, err)
			if cur.Status != idemkit.StatusFailed || cur.Fence != want.Fence+1 || cur.Owner != "" || cur.Error != RecoveredError {
				t.Fatalf("recovered %s: %+v", k, cur)
			}
		}
		for _, k := range []string{"live", "gid", "done"} {
			cur, err := f.get(k)
			must(t, err)
			if cur.Owner != "owner-"+k {
				t.Fatalf("%s was recovered: %+v", k, cur)
			}
		}
	})
}
