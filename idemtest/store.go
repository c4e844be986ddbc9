package idemtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/sweep"
)

// NewStore returns the Store under test over a fresh, empty table.
type NewStore func(t *testing.T) idemkit.Store

// Sweepable is implemented by Stores that support the sweeper.
type Sweepable interface {
	DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error)
	RecoverStale(ctx context.Context, now time.Time, limit int) (int, error)
}

// RunStore runs the Store conformance suite. Subtests run one after another; each calls newStore.
func RunStore(t *testing.T, newStore NewStore) {
	t.Run("Contract", func(t *testing.T) { runContract(t, newStore) })
	t.Run("TxContract", func(t *testing.T) { runTxContract(t, newStore) })
	t.Run("StateTable", func(t *testing.T) { runStateTable(t, newStore) })
	t.Run("TxStateTable", func(t *testing.T) { runTxStateTable(t, newStore) })
	t.Run("TxMark", func(t *testing.T) { runTxMark(t, newStore) })
	t.Run("Sweeper", func(t *testing.T) { runSweeper(t, newStore) })
	t.Run("Pending", func(t *testing.T) { runPending(t, newStore) })
	t.Run("Storm", func(t *testing.T) {
		s := newStore(t)
		Storm(t, StormConfig{Stores: []idemkit.Store{s, s, s}})
	})
}

var ctxb = context.Background()

// contractNow is the instant the contract's records are written at. It has a fraction of a second:
// RequireSameRecord compares times to the millisecond, and a Store keeping them to the second (a
// DATETIME column without fractional seconds) would cut a lease short by up to a second.
func contractNow() time.Time { return NewClock().Now().Add(123 * time.Millisecond) }

// sample returns a fully populated record at the clock's time.
func sample(now time.Time, scope, key string) *idemkit.Record {
	return &idemkit.Record{
		Scope: scope, Key: key, Status: idemkit.StatusProcessing, Fence: 1, Owner: "owner-1",
		Fingerprint: "fp-1", GID: "gid-1", BranchID: "01", Response: []byte("resp"), Error: "err text",
		LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(24 * time.Hour), CreatedAt: now, UpdatedAt: now,
	}
}

// RequireSameRecord fails t unless got holds want's fields, times compared at millisecond precision
// and a nil Response equal to an empty one.
func RequireSameRecord(t testing.TB, want, got *idemkit.Record) {
	t.Helper()
	if got == nil {
		t.Fatalf("record is nil, want %+v", want)
	}
	same := func(a, b time.Time) bool { return a.Truncate(time.Millisecond).Equal(b.Truncate(time.Millisecond)) }
	switch {
	case want.Scope != got.Scope, want.Key != got.Key:
		t.Fatalf("identity: got %q/%q, want %q/%q", got.Scope, got.Key, want.Scope, want.Key)
	case want.Status != got.Status, want.Fence != got.Fence, want.Owner != got.Owner:
		t.Fatalf("state: got %s/%d/%q, want %s/%d/%q", got.Status, got.Fence, got.Owner, want.Status, want.Fence, want.Owner)
	case want.Fingerprint != got.Fingerprint, want.GID != got.GID, want.BranchID != got.BranchID, want.Error != got.Error:
		t.Fatalf("fields: got %+v, want %+v", got, want)
	case !bytes.Equal(want.Response, got.Response) && max(len(want.Response), len(got.Response)) <= 64:
		t.Fatalf("response: got %q, want %q", got.Response, want.Response)
	case !bytes.Equal(want.Response, got.Response):
		t.Fatalf("response: got %d bytes, want %d bytes", len(got.Response), len(want.Response))
	case !same(want.LeaseUntil, got.LeaseUntil), !same(want.ExpiresAt, got.ExpiresAt),
		!same(want.CreatedAt, got.CreatedAt), !same(want.UpdatedAt, got.UpdatedAt):
		t.Fatalf("times: got lease %v expires %v created %v updated %v, want %v %v %v %v",
			got.LeaseUntil, got.ExpiresAt, got.CreatedAt, got.UpdatedAt,
			want.LeaseUntil, want.ExpiresAt, want.CreatedAt, want.UpdatedAt)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want %v", err, target)
	}
}

func runContract(t *testing.T, newStore NewStore) {
	now := contractNow()

	t.Run("InsertGet", func(t *testing.T) {
		s := newStore(t)
		rec := sample(now, "scope", "key")
		must(t, s.Insert(ctxb, rec))
		got, err := s.Get(ctxb, "scope", "key")
		must(t, err)
		RequireSameRecord(t, rec, got)
		_, err = s.Get(ctxb, "scope", "other")
		wantErr(t, err, idemkit.ErrNotFound)
		_, err = s.Get(ctxb, "other", "key")
		wantErr(t, err, idemkit.ErrNotFound)
	})

	t.Run("InsertNeverOverwrites", func(t *testing.T) {
		s := newStore(t)
		for i, st := range []idemkit.Status{idemkit.StatusProcessing, idemkit.StatusSucceeded, idemkit.StatusFailed, idemkit.StatusRejected} {
			key := "k" + string(rune('a'+i))
			rec := sample(now, "s", key)
			rec.Status = st
			must(t, s.Insert(ctxb, rec))
			dup := sample(now.Add(time.Hour), "s", key)
			dup.Owner, dup.Response = "intruder", []byte("other")
			wantErr(t, s.Insert(ctxb, dup), idemkit.ErrExists)
			got, err := s.Get(ctxb, "s", key)
			must(t, err)
			RequireSameRecord(t, rec, got)
		}
	})

	t.Run("UpdateCompareAndSwap", func(t *testing.T) {
		s := newStore(t)
		rec := sample(now, "s", "k")
		must(t, s.Insert(ctxb, rec))
		// A finish writes every column a claim's own write may change (see idemkit.Store.Update).
		next := *rec
		next.Status, next.Response, next.Error, next.UpdatedAt = idemkit.StatusSucceeded, []byte("done"), "", now.Add(time.Second)
		next.LeaseUntil, next.ExpiresAt = now.Add(time.Second), now.Add(48*time.Hour)
		wantErr(t, s.Update(ctxb, &next, idemkit.Version{Fence: 2, Owner: rec.Owner, Status: rec.Status}), idemkit.ErrFenced)
		wantErr(t, s.Update(ctxb, &next, idemkit.Version{Fence: 1, Owner: "someone-else", Status: rec.Status}), idemkit.ErrFenced)
		wantErr(t, s.Update(ctxb, &next, idemkit.Version{Fence: 1, Owner: rec.Owner, Status: idemkit.StatusFailed}), idemkit.ErrFenced)
		got, err := s.Get(ctxb, "s", "k")
		must(t, err)
		RequireSameRecord(t, rec, got)

		must(t, s.Update(ctxb, &next, rec.Version()))
		got, err = s.Get(ctxb, "s", "k")
		must(t, err)
		RequireSameRecord(t, &next, got)

		// Once finished, a write decided from the PROCESSING state no longer matches, although fence
		// and owner are unchanged.
		late := *rec
		late.Status = idemkit.StatusFailed
		wantErr(t, s.Update(ctxb, &late, rec.Version()), idemkit.ErrFenced)
		wantErr(t, s.Delete(ctxb, "s", "k", rec.Version()), idemkit.ErrFenced)

		// A takeover changes fence and owner, and writes a new claim's every column (its gid, its
		// payload's fingerprint once the old record expired, its times); the old version no longer
		// matches.
		later := now.Add(time.Hour)
		taken := idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusProcessing, Fence: 2, Owner: "owner-2",
			Fingerprint: "fp-2", GID: "gid-2", BranchID: "02", LeaseUntil: later.Add(30 * time.Second),
			ExpiresAt: later.Add(24 * time.Hour), CreatedAt: later, UpdatedAt: later}
		must(t, s.Update(ctxb, &taken, next.Version()))
		wantErr(t, s.Update(ctxb, &next, rec.Version()), idemkit.ErrFenced)
		got, err = s.Get(ctxb, "s", "k")
		must(t, err)
		RequireSameRecord(t, &taken, got)

		// An update that changes nothing still succeeds (MySQL reports such rows as unaffected).
		must(t, s.Update(ctxb, &taken, taken.Version()))

		missing := sample(now, "s", "missing")
		wantErr(t, s.Update(ctxb, missing, missing.Version()), idemkit.ErrFenced)
	})

	t.Run("DeleteCompareAndSwap", func(t *testing.T) {
		s := newStore(t)
		rec := sample(now, "s", "k")
		must(t, s.Insert(ctxb, rec))
		wantErr(t, s.Delete(ctxb, "s", "k", idemkit.Version{Fence: 1, Owner: "x", Status: rec.Status}), idemkit.ErrFenced)
		wantErr(t, s.Delete(ctxb, "s", "k", idemkit.Version{Fence: 9, Owner: rec.Owner, Status: rec.Status}), idemkit.ErrFenced)
		must(t, s.Delete(ctxb, "s", "k", rec.Version()))
		_, err := s.Get(ctxb, "s", "k")
		wantErr(t, err, idemkit.ErrNotFound)
		wantErr(t, s.Delete(ctxb, "s", "k", rec.Version()), idemkit.ErrFenced)
		must(t, s.Insert(ctxb, rec)) // the key is free again
	})

	t.Run("RoundTrip", func(t *testing.T) {
		s := newStore(t)
		long := strings.Repeat("é", idemkit.MaxStoredLen/2) // 128 bytes of 2-byte runes
		big := bytes.Repeat([]byte{0, 1, 2, 0xff}, 1<<18)   // 1 MiB with zero bytes
		cases := []*idemkit.Record{
			sample(now, long, long),
			sample(now, "s", "日本語-キー"),
			func() *idemkit.Record { r := sample(now, "s", "binary"); r.Response = []byte{0, 0, 'x', 0}; return r }(),
			func() *idemkit.Record { r := sample(now, "s", "big"); r.Response = big; return r }(),
			func() *idemkit.Record {
				r := sample(now, "s", "empty")
				r.Response, r.Error, r.GID, r.BranchID, r.Fingerprint = nil, "", "", "", ""
				return r
			}(),
			func() *idemkit.Record { r := sample(now, "s", "fence"); r.Fence = 1 << 40; return r }(),
		}
		for _, rec := range cases {
			must(t, s.Insert(ctxb, rec))
			got, err := s.Get(ctxb, rec.Scope, rec.Key)
			must(t, err)
			RequireSameRecord(t, rec, got)
		}
	})

	t.Run("ExpiredRecordsStay", func(t *testing.T) {
		// Expiry is the Guard's to judge, by its own clock; a sweeper deletes the expired records that
		// no attempt still answers for. Two never go while their expiry passed, by the real clock too,
		// which every other check's records (in 2030) never reach: a claim of a global transaction
		// nobody settled, and a claim whose lease is live. A Store must keep them as they are — Get
		// returns them, Insert does not replace them — and a Guard answers their duplicates in flight.
		// A Store that hid them from Get (a read filtered by the database's clock) failed every call of
		// such a key (its Insert found a record its read did not); one whose Insert replaced them ran
		// a second attempt beside the live one, or lost the transaction's outcome.
		s := newStore(t)
		now := time.Now().Truncate(time.Millisecond)
		unsettled := sample(now.Add(-48*time.Hour), "s", "unsettled") // lease and expiry two days gone
		unsettled.GID = "gid-1"
		alive := sample(now.Add(-48*time.Hour), "s", "alive")
		alive.GID, alive.LeaseUntil = "", now.Add(time.Hour) // renewed past its record's expiry
		// A Guard on the real clock.
		g, err := idemkit.New(s, &idemkit.Options{Lease: lease, TTL: time.Hour})
		must(t, err)
		for _, rec := range []*idemkit.Record{unsettled, alive} {
			must(t, s.Insert(ctxb, rec))
			got, err := s.Get(ctxb, "s", rec.Key)
			if err != nil {
				t.Fatalf("Get of the %s claim, its expiry passed by the real clock: %v; want the record", rec.Key, err)
			}
			RequireSameRecord(t, rec, got)
			dup := sample(now, "s", rec.Key)
			dup.Owner, dup.GID = "intruder", ""
			if err := s.Insert(ctxb, dup); !errors.Is(err, idemkit.ErrExists) {
				t.Fatalf("Insert over the %s claim, its expiry passed by the real clock: %v; want ErrExists (it never overwrites)", rec.Key, err)
			}
			got, err = s.Get(ctxb, "s", rec.Key)
			must(t, err)
			RequireSameRecord(t, rec, got)
			c := &counter{}
			if _, err := g.Do(ctxb, idemkit.Call{Scope: "s", Key: rec.Key}, c.fn); !errors.Is(err, idemkit.ErrInFlight) {
				t.Fatalf("Guard call of the %s claim's key: %v; want ErrInFlight", rec.Key, err)
			}
			c.want(t, 0)
		}
	})

	t.Run("KeysCompareByteForByte", func(t *testing.T) {
		// Keys and scopes that a text collation folds together (case, trailing spaces, accents,
		// Unicode normalisation) are different keys: a Store conflating them answers one client's
		// request with another's result.
		s := newStore(t)
		variants := []string{"key", "KEY", "Key", "key ", "kéy", "ke\u0301y", "kèy"}
		var recs []*idemkit.Record
		for i, v := range variants {
			for j, r := range []*idemkit.Record{sample(now, "s", v), sample(now, v, "k")} {
				r.Owner, r.Response = fmt.Sprintf("owner-%d-%d", i, j), fmt.Appendf(nil, "resp-%d-%d", i, j)
				must(t, s.Insert(ctxb, r))
				recs = append(recs, r)
			}
		}
		for _, r := range recs {
			got, err := s.Get(ctxb, r.Scope, r.Key)
			must(t, err)
			RequireSameRecord(t, r, got)
		}
	})

	t.Run("RecordsAreCopies", func(t *testing.T) {
		// The Store keeps its own copy of what it is given and hands each reader its own: a caller
		// reusing a result's buffer, or writing into a replay's Result.Value, must not change the
		// record.
		s := newStore(t)
		rec := sample(now, "s", "k")
		want := *rec
		want.Response = []byte("resp")
		must(t, s.Insert(ctxb, rec))
		copy(rec.Response, "XXXX")
		got, err := s.Get(ctxb, "s", "k")
		must(t, err)
		RequireSameRecord(t, &want, got)
		next := want
		next.Status, next.Response = idemkit.StatusSucceeded, []byte("done")
		must(t, s.Update(ctxb, &next, want.Version()))
		copy(next.Response, "XXXX")
		next.Response = []byte("done")
		for range 2 {
			got, err = s.Get(ctxb, "s", "k")
			must(t, err)
			RequireSameRecord(t, &next, got)
			copy(got.Response, "YYYY")
		}
	})

	t.Run("ConcurrentInsert", func(t *testing.T) {
		s := newStore(t)
		var wins, exists atomic.Int32
		parallel(32, func(i int) {
			rec := sample(now, "s", "race")
			rec.Owner = "owner-" + string(rune('A'+i))
			switch err := s.Insert(ctxb, rec); {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, idemkit.ErrExists):
				exists.Add(1)
			default:
				t.Error(err)
			}
		})
		if wins.Load() != 1 || exists.Load() != 31 {
			t.Fatalf("inserts: %d won, %d saw ErrExists; want 1 and 31", wins.Load(), exists.Load())
		}
	})

	t.Run("ConcurrentUpdate", func(t *testing.T) {
		s := newStore(t)
		rec := sample(now, "s", "race")
		must(t, s.Insert(ctxb, rec))
		var wins, fenced atomic.Int32
		parallel(32, func(i int) {
			next := *rec
			next.Fence, next.Owner = 2, "taker-"+string(rune('A'+i))
			switch err := s.Update(ctxb, &next, rec.Version()); {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, idemkit.ErrFenced):
				fenced.Add(1)
			default:
				t.Error(err)
			}
		})
		if wins.Load() != 1 || fenced.Load() != 31 {
			t.Fatalf("updates: %d won, %d fenced; want 1 and 31", wins.Load(), fenced.Load())
		}
	})

	t.Run("CancelledContext", func(t *testing.T) {
		s := newStore(t)
		ctx, cancel := context.WithCancel(ctxb)
		cancel()
		if err := s.Insert(ctx, sample(now, "s", "k")); err == nil {
			t.Fatal("Insert on a cancelled context succeeded")
		}
		if _, err := s.Get(ctx, "s", "k"); err == nil || errors.Is(err, idemkit.ErrNotFound) {
			t.Fatalf("Get on a cancelled context: %v", err)
		}
	})
}

// parallel runs f(0..n-1) on n goroutines released together, and waits.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}

func runSweeper(t *testing.T, newStore NewStore) {
	s := newStore(t)
	sw, ok := s.(Sweepable)
	if !ok {
		t.Skip("the Store has no sweeper hooks (DeleteExpired, RecoverStale)")
	}
	now := contractNow()
	put := func(key string, mod func(r *idemkit.Record)) *idemkit.Record {
		r := sample(now, "sweep", key)
		r.GID = ""
		mod(r)
		must(t, s.Insert(ctxb, r))
		return r
	}
	for i := range 5 {
		put("expired"+string(rune('a'+i)), func(r *idemkit.Record) {
			r.Status, r.ExpiresAt = idemkit.StatusSucceeded, now.Add(-time.Minute)
		})
	}
	live := put("live", func(r *idemkit.Record) { r.Status = idemkit.StatusSucceeded })
	// A zero ExpiresAt never expires (Record.Expired): the sweeper leaves such a record alone.
	never := put("never", func(r *idemkit.Record) { r.Status, r.ExpiresAt = idemkit.StatusSucceeded, time.Time{} })
	stale := put("stale", func(r *idemkit.Record) { r.LeaseUntil = now.Add(-time.Second) })
	stale2 := put("stale2", func(r *idemkit.Record) { r.LeaseUntil = now.Add(-time.Hour) })
	withGID := put("gid", func(r *idemkit.Record) { r.LeaseUntil, r.GID = now.Add(-time.Second), "gid-1" })
	leased := put("leased", func(r *idemkit.Record) {})
	// A claim whose lease is live is in flight whatever its expiry (a record written before renewals
	// moved the expiry with the lease): never deleted. Once its lease ran out too, it goes.
	liveClaimExpired := put("live-claim-expired", func(r *idemkit.Record) { r.ExpiresAt = now.Add(-time.Minute) })
	put("dead-claim-expired", func(r *idemkit.Record) { r.LeaseUntil, r.ExpiresAt = now.Add(-time.Second), now.Add(-time.Minute) })

	total := 0
	for range 10 {
		n, err := sw.DeleteExpired(ctxb, now, 2)
		must(t, err)
		if n > 2 {
			t.Fatalf("DeleteExpired deleted %d records, more than its limit 2", n)
		}
		total += n
		if n == 0 {
			break
		}
	}
	if total != 6 {
		t.Fatalf("DeleteExpired deleted %d records in all, want 6", total)
	}
	got, err := s.Get(ctxb, "sweep", "live")
	must(t, err)
	RequireSameRecord(t, live, got)

	n, err := sw.RecoverStale(ctxb, now, 1)
	must(t, err)
	if n != 1 {
		t.Fatalf("RecoverStale(limit 1) = %d, want 1", n)
	}
	n, err = sw.RecoverStale(ctxb, now, 10)
	must(t, err)
	if n != 1 {
		t.Fatalf("second RecoverStale = %d, want 1", n)
	}
	for _, r := range []*idemkit.Record{stale, stale2} {
		got, err := s.Get(ctxb, "sweep", r.Key)
		must(t, err)
		if got.Status != idemkit.StatusFailed || got.Fence != r.Fence+1 || got.Owner != "" {
			t.Fatalf("recovered %s: status %s fence %d owner %q; want FAILED, %d, \"\"", r.Key, got.Status, got.Fence, got.Owner, r.Fence+1)
		}
		// The stalled holder can no longer finish it.
		done := *r
		done.Status = idemkit.StatusSucceeded
		wantErr(t, s.Update(ctxb, &done, r.Version()), idemkit.ErrFenced)
	}
	for _, r := range []*idemkit.Record{withGID, leased, liveClaimExpired, never} {
		got, err := s.Get(ctxb, "sweep", r.Key)
		must(t, err)
		RequireSameRecord(t, r, got)
	}

	// A Store that reports the claims it recovers (sweep.ClaimRecoverer) reports them as they were:
	// sweep.RecordTasksWithLocker releases each dead holder's lock by the owner it returns, and one
	// reported as recovered (owner "") leaves that lock answering the key in flight until it expires.
	cr, ok := s.(sweep.ClaimRecoverer)
	if !ok {
		return
	}
	claimA := put("claim-a", func(r *idemkit.Record) { r.LeaseUntil, r.Fence, r.Owner = now.Add(-time.Second), 3, "holder-a" })
	claimB := put("claim-b", func(r *idemkit.Record) { r.LeaseUntil, r.Owner = now.Add(-time.Minute), "holder-b" })
	recs, err := cr.RecoverStaleClaims(ctxb, now, 10)
	must(t, err)
	if len(recs) != 2 {
		t.Fatalf("RecoverStaleClaims returned %d claims, want the 2 stale ones (claim-a, claim-b)", len(recs))
	}
	slices.SortFunc(recs, func(a, b *idemkit.Record) int { return strings.Compare(a.Key, b.Key) })
	for i, want := range []*idemkit.Record{claimA, claimB} {
		got := recs[i]
		if got.Scope != want.Scope || got.Key != want.Key || got.Status != want.Status || got.Fence != want.Fence || got.Owner != want.Owner {
			t.Fatalf("RecoverStaleClaims reported %s/%s %s fence %d owner %q; want the claim as it was: %s/%s %s fence %d owner %q",
				got.Scope, got.Key, got.Status, got.Fence, got.Owner, want.Scope, want.Key, want.Status, want.Fence, want.Owner)
		}
		cur, err := s.Get(ctxb, "sweep", want.Key)
		must(t, err)
		if cur.Status != idemkit.StatusFailed || cur.Fence != want.Fence+1 || cur.Owner != "" {
			t.Fatalf("claim %s after RecoverStaleClaims: %s fence %d owner %q; want FAILED, %d, \"\"", want.Key, cur.Status, cur.Fence, cur.Owner, want.Fence+1)
		}
	}
	if recs, err := cr.RecoverStaleClaims(ctxb, now, 10); err != nil || len(recs) != 0 {
		t.Fatalf("RecoverStaleClaims again: %d claims, %v; want none (recovered already)", len(recs), err)
	}
}
