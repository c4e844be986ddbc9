package record

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// repeatableRead opens the test PostgreSQL database on a DSN whose sessions run every transaction
// in REPEATABLE READ (default_transaction_isolation), as a user's DSN or role may set it.
func repeatableRead(t *testing.T) *gorm.DB {
	t.Helper()
	db := testsvc.PostgresWith(t, nil, " default_transaction_isolation='repeatable read'")
	sqlDB, err := db.DB()
	must(t, err)
	sqlDB.SetMaxOpenConns(maxConns)
	var level string
	must(t, db.Raw("SHOW default_transaction_isolation").Scan(&level).Error)
	if level != "repeatable read" {
		t.Fatalf("default_transaction_isolation = %q, want repeatable read", level)
	}
	return db
}

// waitForLockWait waits until a statement on table waits for a lock (another transaction's row).
func waitForLockWait(t *testing.T, db *gorm.DB, table string) {
	t.Helper()
	for range 500 {
		var n int64
		must(t, db.Raw("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE ?",
			"%"+table+"%").Scan(&n).Error)
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no statement waited for the other transaction's row")
}

// TestExecuteUnderRepeatableReadMeetsConcurrentWriter: on a PostgreSQL pool whose sessions default to
// REPEATABLE READ, a Guard.Do (Execute mode, no Locker) whose claim waits for another attempt's
// uncommitted write of the key — a claim, a takeover — gets that attempt's answer once it commits: in
// flight, and its function does not run. A statement outside any transaction is its own transaction:
// the serialization failure PostgreSQL raises when the row it waited for was committed after the
// statement's snapshot is no more than a retry of that statement, as under READ COMMITTED. It must
// not come back as "record store unavailable".
func TestExecuteUnderRepeatableReadMeetsConcurrentWriter(t *testing.T) {
	db := repeatableRead(t)
	s := newTable(t, db)
	g, err := idemkit.New(s, &idemkit.Options{Lease: time.Minute})
	must(t, err)
	ctx, cancel := context.WithTimeout(ctxb, 30*time.Second)
	defer cancel()
	now := time.Now()
	claim := func(key string, fence int64, status idemkit.Status) *idemkit.Record {
		return &idemkit.Record{Scope: "rr", Key: key, Status: status, Fence: fence, Owner: "other-" + key,
			LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}
	}

	for _, tc := range []struct {
		name   string
		write  func(tx *Store, key string) error // the other attempt's write, in its transaction
		setup  func(key string)                  // committed before it
		replay string                            // the answer when the other attempt finished the key
	}{
		{"claim", func(tx *Store, key string) error { return tx.Insert(ctx, claim(key, 1, idemkit.StatusProcessing)) }, nil, ""},
		{"finish", func(tx *Store, key string) error {
			done := claim(key, 1, idemkit.StatusSucceeded)
			done.Response, done.LeaseUntil = []byte("theirs"), now
			return tx.Update(ctx, done, claim(key, 1, idemkit.StatusProcessing).Version())
		}, func(key string) {
			stale := claim(key, 1, idemkit.StatusProcessing)
			stale.LeaseUntil = now.Add(-time.Second) // the claim's lease ran out: Do would take it over
			must(t, s.Insert(ctx, stale))
		}, "theirs"},
		{"takeover", func(tx *Store, key string) error {
			failed := claim(key, 1, idemkit.StatusFailed)
			return tx.Update(ctx, claim(key, 2, idemkit.StatusProcessing), failed.Version())
		}, func(key string) {
			failed := claim(key, 1, idemkit.StatusFailed)
			failed.LeaseUntil = now
			must(t, s.Insert(ctx, failed))
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := testsvc.Name("k-")
			if tc.setup != nil {
				tc.setup(key)
			}
			tx := db.Begin()
			must(t, tx.Error)
			defer tx.Rollback()
			must(t, tc.write(s.WithTx(tx), key))

			var ran atomic.Int32
			type answer struct {
				res idemkit.Result
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := g.Do(ctx, idemkit.Call{Scope: "rr", Key: key}, func(context.Context) ([]byte, error) {
					ran.Add(1)
					return []byte("mine"), nil
				})
				done <- answer{res, err}
			}()
			waitForLockWait(t, db, s.Table())
			must(t, tx.Commit().Error)

			a := <-done
			if tc.replay != "" {
				if a.err != nil || !a.res.Replayed || string(a.res.Value) != tc.replay {
					t.Fatalf("Do after the other attempt's %s committed: %+v, %v; want its result replayed", tc.name, a.res, a.err)
				}
			} else if !errors.Is(a.err, idemkit.ErrInFlight) {
				t.Fatalf("Do after the other attempt's %s committed: %+v, %v; want ErrInFlight", tc.name, a.res, a.err)
			}
			if ran.Load() != 0 {
				t.Fatalf("the function ran %d times for a key another attempt holds", ran.Load())
			}
		})
	}
}

// TestSweepUnderRepeatableReadLeavesTakenOverRecord: on a PostgreSQL pool whose sessions default to
// REPEATABLE READ, DeleteExpired and RecoverStale that wait for a takeover of a record they selected
// leave it alone once the takeover commits — the re-check of their condition on the row's latest
// version — and go on, as under READ COMMITTED: the sweep does not fail with a serialization failure.
func TestSweepUnderRepeatableReadLeavesTakenOverRecord(t *testing.T) {
	db := repeatableRead(t)
	s := newTable(t, db)
	ctx, cancel := context.WithTimeout(ctxb, 30*time.Second)
	defer cancel()
	now := time.Now()

	for _, tc := range []struct {
		name   string
		status idemkit.Status
		expiry time.Time // the record's before its takeover
		sweep  func() (int, error)
	}{
		{"DeleteExpired", idemkit.StatusFailed, now.Add(-time.Minute), func() (int, error) { return s.DeleteExpired(ctx, time.Now(), 100) }},
		{"RecoverStale", idemkit.StatusProcessing, now.Add(time.Hour), func() (int, error) { return s.RecoverStale(ctx, time.Now(), 100) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := testsvc.Name("k-")
			old := &idemkit.Record{Scope: "sw", Key: key, Status: tc.status, Fence: 1, Owner: "dead",
				LeaseUntil: now.Add(-time.Minute), ExpiresAt: tc.expiry, CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour)}
			must(t, s.Insert(ctx, old))
			tx := db.Begin()
			must(t, tx.Error)
			defer tx.Rollback()
			taken := &idemkit.Record{Scope: "sw", Key: key, Status: idemkit.StatusProcessing, Fence: 2, Owner: "new",
				LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}
			must(t, s.WithTx(tx).Update(ctx, taken, old.Version()))

			type answer struct {
				n   int
				err error
			}
			done := make(chan answer, 1)
			go func() {
				n, err := tc.sweep()
				done <- answer{n, err}
			}()
			waitForLockWait(t, db, s.Table())
			must(t, tx.Commit().Error)

			if a := <-done; a.err != nil || a.n != 0 {
				t.Fatalf("%s racing a takeover: %d, %v; want 0 and no error", tc.name, a.n, a.err)
			}
			cur, err := s.Get(ctx, "sw", key)
			must(t, err)
			if cur.Version() != taken.Version() {
				t.Fatalf("record after the sweep: %+v; want the takeover's", cur)
			}
		})
	}
}

// hookStore is a Store bound to a caller's transaction whose Insert and Get run a hook after their
// own statement, and whose Get reads without a lock when unlocked is set (so that another session
// can write the row before the caller's next statement).
type hookStore struct {
	*Store
	afterInsert, afterGet func()
	unlocked              bool
}

func (h *hookStore) Insert(ctx context.Context, rec *idemkit.Record) error {
	err := h.Store.Insert(ctx, rec)
	if h.afterInsert != nil {
		h.afterInsert()
	}
	return err
}

func (h *hookStore) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	get := h.Store.Get
	if h.unlocked {
		get = h.Store.Peek
	}
	rec, err := get(ctx, scope, key)
	if h.afterGet != nil {
		h.afterGet()
	}
	return rec, err
}

// TestMarkTxUnderRepeatableReadTakeoverRaceIsDuplicate: a MarkTx in a PostgreSQL REPEATABLE READ
// transaction meeting a failed record, which another attempt takes over and marks done after the
// transaction's snapshot — between the claim's INSERT and its locking read of the record, or between
// that read and its takeover — fails that read or that takeover with a serialization failure, which
// aborts the transaction. The call must be answered as the duplicate it is (ErrDuplicate), from the
// record read outside the aborted transaction, as when the INSERT itself fails so; not "record store
// unavailable".
func TestMarkTxUnderRepeatableReadTakeoverRaceIsDuplicate(t *testing.T) {
	db := repeatableRead(t)
	s := newTable(t, db)
	g, err := idemkit.New(s, nil)
	must(t, err)
	ctx, cancel := context.WithTimeout(ctxb, 30*time.Second)
	defer cancel()

	for _, race := range []string{"read", "takeover"} {
		t.Run(race, func(t *testing.T) {
			key := testsvc.Name("k-")
			now := time.Now()
			failed := &idemkit.Record{Scope: "rr", Key: key, Status: idemkit.StatusFailed, Fence: 3, Owner: "failed",
				LeaseUntil: now, ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}
			must(t, s.Insert(ctx, failed))
			// The other attempt's takeover: a mark, done at once, committed on its own.
			other := func() {
				marked := *failed
				marked.Status, marked.Fence, marked.Owner, marked.Error = idemkit.StatusSucceeded, 4, "other", ""
				must(t, s.Update(ctx, &marked, failed.Version()))
			}
			var ran atomic.Int32
			err := db.Transaction(func(tx *gorm.DB) error {
				h := &hookStore{Store: s.WithTx(tx)}
				if race == "read" {
					h.afterInsert = other
				} else {
					h.afterGet, h.unlocked = other, true
				}
				return g.MarkTx(ctx, h, idemkit.Call{Scope: "rr", Key: key}, func(context.Context) error {
					ran.Add(1)
					return nil
				})
			})
			if !errors.Is(err, idemkit.ErrDuplicate) || errors.Is(err, idemkit.ErrStoreUnavailable) {
				t.Fatalf("MarkTx of a key another attempt took over and marked after the snapshot: %v; want ErrDuplicate", err)
			}
			if n := ran.Load(); n != 0 {
				t.Fatalf("the function ran %d times for a key marked by another attempt", n)
			}
		})
	}
}
