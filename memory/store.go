package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit"
)

// Store is an in-memory [idemkit.Store]. The zero value is not usable; call [NewStore].
// It is safe for concurrent use. A record stays after it expired until its key is used again or a
// sweeper deletes it ([github.com/idemkit/idemkit/sweep.RecordTasksWithLocker] of the Store and the
// Guards' Locker, which also releases a recovered claim's lock, as with record.Store): a long-running
// program that meets new keys all the time runs one, or its memory grows with every key.
// It holds a result of any size, where package record on MySQL and MariaDB refuses one above 16 MiB
// (idemkit.ErrUnstorable: the key is then recorded REJECTED without it): a unit test of a large
// result on this Store does not show what production does there.
//
// It also begins transactions ([Store.BeginTx], for [idemkit.Guard.Tx]), which lock the keys they
// touch as InnoDB and PostgreSQL lock rows: a key a transaction read (Get), inserted, updated or
// deleted stays locked until its Commit or Rollback, or the end of its context; other transactions'
// statements on that key (but Peek) and writes outside any transaction wait for it, while every other
// key stays free (a Guard call on another key, made from inside a guarded transaction's function,
// runs at once, as on record.Store); reads outside a transaction (Get, Peek) see only committed
// records and never wait. Transactions that would wait for each other in a cycle (of two or more)
// fail as a database's deadlock victim would: the one that would wait last is rolled back and its
// statement returns an error matching [idemkit.ErrConflict]. A wait that closes a cycle through
// something else than a key's lock (the holder's code waiting for a write outside any transaction,
// or for a guarded call, that waits for a key the waiter holds) is not detected: it lasts until a
// context ends, as on PostgreSQL, where MariaDB gives up after innodb_lock_wait_timeout.
type Store struct {
	mu      sync.Mutex
	records map[recKey]*idemkit.Record
	locks   map[recKey]*rowLock // the keys open transactions locked
}

type recKey struct{ scope, key string }

// rowLock is a key's lock, held by a transaction until it ends.
type rowLock struct {
	tx   *Tx
	free chan struct{} // closed when released
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{records: make(map[recKey]*idemkit.Record), locks: make(map[recKey]*rowLock)}
}

func clone(r *idemkit.Record) *idemkit.Record {
	c := *r
	if r.Response != nil {
		c.Response = append([]byte(nil), r.Response...)
	}
	return &c
}

// write runs apply with s.mu held once no transaction holds k's lock, waiting for the one holding it
// until ctx is done. When ctx ended first, nothing was written, and never will be: it returns an
// error matching idemkit.ErrNotSent and ctx's error.
func (s *Store) write(ctx context.Context, k recKey, apply func() error) error {
	for {
		if err := ctx.Err(); err != nil {
			return notSent(err)
		}
		s.mu.Lock()
		l := s.locks[k]
		if l == nil {
			defer s.mu.Unlock()
			return apply()
		}
		s.mu.Unlock()
		select {
		case <-l.free:
		case <-ctx.Done():
			return notSent(ctx.Err())
		}
	}
}

// notSent is the error of a write whose context ended before it was made.
func notSent(err error) error {
	return fmt.Errorf("memory: writing record: %w: %w", idemkit.ErrNotSent, err)
}

// Insert implements [idemkit.Store]. When ctx ends before the record is written (at once, or while
// the Insert waits for a transaction holding the key) it returns an error matching
// idemkit.ErrNotSent and ctx's error: the record is not written, and never will be.
func (s *Store) Insert(ctx context.Context, rec *idemkit.Record) error {
	k := recKey{rec.Scope, rec.Key}
	return s.write(ctx, k, func() error {
		if _, ok := s.records[k]; ok {
			return idemkit.ErrExists
		}
		s.records[k] = clone(rec)
		return nil
	})
}

// Get implements [idemkit.Store].
func (s *Store) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[recKey{scope, key}]
	if !ok {
		return nil, idemkit.ErrNotFound
	}
	return clone(r), nil
}

// Peek implements [idemkit.Peeker]: the same as Get (outside a transaction nothing is locked).
func (s *Store) Peek(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	return s.Get(ctx, scope, key)
}

// Update implements [idemkit.Store].
func (s *Store) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	k := recKey{rec.Scope, rec.Key}
	return s.write(ctx, k, func() error {
		cur, ok := s.records[k]
		if !ok || cur.Version() != prev {
			return idemkit.ErrFenced
		}
		s.records[k] = clone(rec)
		return nil
	})
}

// Delete implements [idemkit.Store].
func (s *Store) Delete(ctx context.Context, scope, key string, prev idemkit.Version) error {
	k := recKey{scope, key}
	return s.write(ctx, k, func() error {
		cur, ok := s.records[k]
		if !ok || cur.Version() != prev {
			return idemkit.ErrFenced
		}
		delete(s.records, k)
		return nil
	})
}

// DeleteExpired deletes up to limit records whose ExpiresAt is not after now and returns how many it
// deleted, as record.Store's does: a record without an ExpiresAt, one tied to a global transaction
// nobody settled yet (PROCESSING with a GID) and a claim whose lease is live (renewed past its
// record's expiry) never expire, and one an open transaction locked is left for a later pass. It is
// the sweeper's hook.
func (s *Store) DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, r := range s.records {
		if n >= limit {
			break
		}
		if s.locks[k] == nil && r.Expired(now) && !unsettled(r) && !(r.Status == idemkit.StatusProcessing && !r.LeaseExpired(now)) {
			delete(s.records, k)
			n++
		}
	}
	return n, nil
}

// RecoverStale marks up to limit PROCESSING records whose lease ran out by now FAILED, bumping their
// fence and clearing their owner, so their stalled holders cannot finish them. Records with a GID
// are left for a transaction reconciler, expired ones for DeleteExpired, and records an open
// transaction locked for a later pass, as record.Store's RecoverStale does. It returns how many it
// recovered.
func (s *Store) RecoverStale(ctx context.Context, now time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	recs := s.recoverStale(now, limit, false)
	return len(recs), nil
}

// RecoverStaleClaims implements [github.com/idemkit/idemkit/sweep.ClaimRecoverer]: it recovers as
// RecoverStale does and returns the claims it recovered as they were (Scope, Key, Status, Fence and
// Owner, the holder's lock token), so that sweep.RecordTasksWithLocker releases the locks their dead
// holders may still hold, as it does with record.Store.
func (s *Store) RecoverStaleClaims(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recoverStale(now, limit, true), nil
}

// recoverStale fails up to limit stale claims (s.mu held) and returns them as they were when report
// is set, else as many nils.
func (s *Store) recoverStale(now time.Time, limit int, report bool) []*idemkit.Record {
	var out []*idemkit.Record
	for k, r := range s.records {
		if len(out) >= limit {
			break
		}
		if s.locks[k] == nil && r.Status == idemkit.StatusProcessing && r.GID == "" && r.LeaseExpired(now) && !r.Expired(now) {
			var was *idemkit.Record
			if report {
				was = &idemkit.Record{Scope: r.Scope, Key: r.Key, Status: r.Status, Fence: r.Fence, Owner: r.Owner}
			}
			r.Status, r.Fence, r.Owner, r.UpdatedAt = idemkit.StatusFailed, r.Fence+1, "", now
			r.Error = recoveredError
			out = append(out, was)
		}
	}
	return out
}

// recoveredError is the Error a record gets when the sweeper recovers it (record.RecoveredError).
const recoveredError = "idemkit: lease expired; recovered by sweeper"

// Len returns the number of records held, expired ones included.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// Pending implements [idemkit.PendingLister]: up to q.Limit PROCESSING records of q.Scopes with a GID
// whose lease ran out by q.Now, oldest lease first, expired or not: the records a transaction
// reconciler must settle.
func (s *Store) Pending(ctx context.Context, q idemkit.PendingQuery) ([]*idemkit.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if q.Limit < 1 || len(q.Scopes) == 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*idemkit.Record
	for _, r := range s.records {
		if r.Status == idemkit.StatusProcessing && r.GID != "" && r.LeaseExpired(q.Now) && slices.Contains(q.Scopes, r.Scope) &&
			(q.After == nil || pendingOrder(q.After, r) < 0) {
			out = append(out, clone(r))
		}
	}
	slices.SortFunc(out, pendingOrder)
	return out[:min(len(out), q.Limit)], nil
}

// pendingOrder is the order of Pending's listing: lease, then scope, then key. Leases compare in
// milliseconds, as the record package stores them.
func pendingOrder(a, b *idemkit.Record) int {
	return cmp.Or(cmp.Compare(a.LeaseUntil.UnixMilli(), b.LeaseUntil.UnixMilli()), strings.Compare(a.Scope, b.Scope), strings.Compare(a.Key, b.Key))
}

// unsettled reports whether r is tied to a global transaction whose outcome is not recorded yet.
func unsettled(r *idemkit.Record) bool { return r.Status == idemkit.StatusProcessing && r.GID != "" }

// BeginTx implements [idemkit.TxBeginner]: it returns a Store bound to a new transaction, at once.
// The transaction locks each key it reads with Get or writes (waiting for another transaction holding
// it, until ctx or the statement's context is done) until it ends; see [Store]. Its writes are
// buffered and applied at Commit; its reads see them over the committed records. A transaction must
// end with Commit or Rollback, or its keys stay locked until ctx is done: as a database/sql
// transaction, it lasts as long as ctx, which rolls it back when done (its statements then fail, and
// Commit returns ctx's error).
func (s *Store) BeginTx(ctx context.Context) (idemkit.TxStore, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t := &Tx{s: s, ctx: ctx, writes: make(map[recKey]*idemkit.Record)}
	// As database/sql does, roll it back once ctx is done, Rollback or not: its locks go.
	t.stop = context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		t.release(nil)
	})
	return t, nil
}

// Tx is a transaction of a memory [Store], from [Store.BeginTx]. It is not safe for concurrent use.
type Tx struct {
	s      *Store
	ctx    context.Context            // BeginTx's: the transaction ends with it
	writes map[recKey]*idemkit.Record // nil value: deleted
	keys   []recKey                   // the keys it locked
	done   bool
	sealed atomic.Bool // see SealTx
	// waits is the transaction whose lock this one waits for (guarded by s.mu), for deadlock
	// detection.
	waits *Tx
	// victim is set (under s.mu) when the transaction was rolled back as a deadlock's victim.
	victim bool
	// stop cancels the rollback BeginTx arranged for when ctx is done.
	stop func() bool
}

// usable returns why a statement on ctx cannot run in the transaction: it ended, or ctx or the
// transaction's context is done.
func (t *Tx) usable(ctx context.Context) error {
	switch {
	case t.done:
		return errTxDone
	case t.ctx.Err() != nil:
		return t.ctx.Err()
	}
	return ctx.Err()
}

var (
	errTxDone     = errors.New("memory: transaction already committed or rolled back")
	errGuardOwned = errors.New("memory: the Guard commits or rolls back this transaction: return the error from the function instead")
	errDeadlock   = fmt.Errorf("memory: deadlock: the transaction waited for a key held by a transaction waiting for one of its own, and was rolled back: %w", idemkit.ErrConflict)
)

// SealTx implements [idemkit.TxSealer]: while the Guard's function runs, Commit and Rollback refuse.
func (t *Tx) SealTx(sealed bool) { t.sealed.Store(sealed) }

// lock takes k's lock for the transaction, waiting for the transaction holding it until ctx or the
// transaction's context is done. When that wait would close a cycle of transactions waiting for each
// other, it rolls the transaction back and returns errDeadlock. It returns nil with s.mu held: the
// statement reads k under it, so that a rollback by the transaction's context, which frees k under
// s.mu, cannot let another writer's record in before the read.
func (t *Tx) lock(ctx context.Context, k recKey) error {
	s := t.s
	for {
		s.mu.Lock()
		if err := t.ctx.Err(); err != nil {
			// Rolled back with its context (see BeginTx), perhaps since usable checked it.
			s.mu.Unlock()
			return err
		}
		l := s.locks[k]
		switch {
		case l == nil:
			s.locks[k] = &rowLock{tx: t, free: make(chan struct{})}
			t.keys = append(t.keys, k)
			return nil
		case l.tx == t:
			return nil
		}
		if t.closesCycle(l.tx) {
			t.release(nil)
			t.done, t.victim = true, true
			s.mu.Unlock()
			t.stop() // ended: nothing is left to roll back when ctx is done
			return errDeadlock
		}
		t.waits = l.tx
		s.mu.Unlock()
		var err error
		select {
		case <-l.free:
		case <-ctx.Done():
			err = ctx.Err()
		case <-t.ctx.Done():
			err = t.ctx.Err()
		}
		s.mu.Lock()
		t.waits = nil
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// closesCycle reports whether t waiting for h would close a cycle of transactions waiting for each
// other; s.mu is held.
func (t *Tx) closesCycle(h *Tx) bool {
	for o := h; o != nil; o = o.waits {
		if o == t {
			return true
		}
	}
	return false
}

// release applies writes (nil: none) and frees the transaction's locks; s.mu is held. The
// transaction then waits for nothing, even while the goroutine of a wait its context ended has not run
// again yet: no cycle is found through it.
func (t *Tx) release(writes map[recKey]*idemkit.Record) {
	s := t.s
	t.waits = nil
	for k, r := range writes {
		if r == nil {
			delete(s.records, k)
		} else {
			s.records[k] = r
		}
	}
	for _, k := range t.keys {
		if l := s.locks[k]; l != nil && l.tx == t {
			delete(s.locks, k)
			close(l.free)
		}
	}
	t.keys = nil
}

// current returns the record as the transaction sees it; s.mu is held.
func (t *Tx) current(k recKey) (*idemkit.Record, bool) {
	if r, ok := t.writes[k]; ok {
		return r, r != nil
	}
	r, ok := t.s.records[k]
	return r, ok
}

// Insert implements [idemkit.Store] in the transaction.
func (t *Tx) Insert(ctx context.Context, rec *idemkit.Record) error {
	if err := t.usable(ctx); err != nil {
		return err
	}
	k := recKey{rec.Scope, rec.Key}
	if err := t.lock(ctx, k); err != nil {
		return err
	}
	defer t.s.mu.Unlock()
	if _, ok := t.current(k); ok {
		return idemkit.ErrExists
	}
	t.writes[k] = clone(rec)
	return nil
}

// Get implements [idemkit.Store] in the transaction: it locks the key, as SELECT ... FOR UPDATE does.
func (t *Tx) Get(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	if err := t.usable(ctx); err != nil {
		return nil, err
	}
	k := recKey{scope, key}
	if err := t.lock(ctx, k); err != nil {
		return nil, err
	}
	defer t.s.mu.Unlock()
	r, ok := t.current(k)
	if !ok {
		return nil, idemkit.ErrNotFound
	}
	return clone(r), nil
}

// Peek implements [idemkit.Peeker]: Get without the lock, which never waits.
func (t *Tx) Peek(ctx context.Context, scope, key string) (*idemkit.Record, error) {
	if err := t.usable(ctx); err != nil {
		return nil, err
	}
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	if err := t.ctx.Err(); err != nil {
		// Rolled back with its context since usable checked it: the keys it held may be another's.
		return nil, err
	}
	r, ok := t.current(recKey{scope, key})
	if !ok {
		return nil, idemkit.ErrNotFound
	}
	return clone(r), nil
}

// Update implements [idemkit.Store] in the transaction.
func (t *Tx) Update(ctx context.Context, rec *idemkit.Record, prev idemkit.Version) error {
	if err := t.usable(ctx); err != nil {
		return err
	}
	k := recKey{rec.Scope, rec.Key}
	if err := t.lock(ctx, k); err != nil {
		return err
	}
	defer t.s.mu.Unlock()
	if cur, ok := t.current(k); !ok || cur.Version() != prev {
		return idemkit.ErrFenced
	}
	t.writes[k] = clone(rec)
	return nil
}

// Delete implements [idemkit.Store] in the transaction.
func (t *Tx) Delete(ctx context.Context, scope, key string, prev idemkit.Version) error {
	if err := t.usable(ctx); err != nil {
		return err
	}
	k := recKey{scope, key}
	if err := t.lock(ctx, k); err != nil {
		return err
	}
	defer t.s.mu.Unlock()
	if cur, ok := t.current(k); !ok || cur.Version() != prev {
		return idemkit.ErrFenced
	}
	t.writes[k] = nil
	return nil
}

// Commit applies the transaction's writes and releases its locks.
func (t *Tx) Commit() error {
	if t.sealed.Load() {
		return errGuardOwned
	}
	if t.done {
		if t.victim {
			return errDeadlock
		}
		return errTxDone
	}
	t.done = true
	t.stop()
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	if err := t.ctx.Err(); err != nil {
		t.release(nil) // rolled back: its context ended
		return err
	}
	t.release(t.writes)
	return nil
}

// Rollback drops the transaction's writes and releases its locks. After Commit it does nothing.
func (t *Tx) Rollback() error {
	if t.sealed.Load() {
		return errGuardOwned
	}
	if t.done {
		return nil
	}
	t.done = true
	t.stop()
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.release(nil)
	return nil
}
