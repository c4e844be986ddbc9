package idemkit

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Claim is an attempt's hold on a record, returned by [Guard.Begin]. Finish it exactly once with
// [Claim.Finish] or [Claim.Detach]. A Claim is not safe for concurrent use.
type Claim struct {
	g    *Guard
	st   Store
	mode Mode
	// callerTx: the claim writes through a Store bound to the caller's transaction (DoTx, MarkTx),
	// which may still roll back, so nothing it reads or writes is cached.
	callerTx bool
	ctx      context.Context // Begin's context, with the observer's additions
	id       identity
	rawKey   string
	token    string
	locked   bool
	rec      Record // the record as this claim last wrote it
	start    time.Time
	ev       Event
	end      func(*Event)
	done     bool
	// cacheable is a finished, committed record read from the Store, cached when the lock is released.
	cacheable *Record
	// lazy, when set, is the fence [Claim.Context] hands the function: Guard.Tx's when nothing was read
	// before the function (see lazyFence). It points to lazyFence, kept here to cost no allocation.
	lazy      *lazyFence
	lazyFence lazyFence
	// began is when a Tx-mode call (Guard.Tx, Guard.DoTx) began, before its function: a finished
	// record it meets after the function that counted then answers it (see judgeMet).
	began time.Time
	// reruns is how many more times Guard.TxMark runs its transaction again when the database rolled
	// it back on a write conflict before the mark (see rerun).
	reruns int
}

// Fence returns the claim's fence: greater than that of every earlier claim of the record.
func (cl *Claim) Fence() int64 { return cl.rec.Fence }

// Record returns a copy of the record as this claim wrote it.
func (cl *Claim) Record() Record { return cl.rec }

// Context returns ctx carrying the claim's fence (see [FenceFromContext]).
func (cl *Claim) Context(ctx context.Context) context.Context {
	if cl.lazy != nil {
		return context.WithValue(ctx, fenceKey{}, cl.lazy)
	}
	return context.WithValue(ctx, fenceKey{}, cl.rec.Fence)
}

type fenceKey struct{}

// errClaimEnded: Finish or Extend on a claim already finished ([Claim.Finish], [Claim.Detach]).
var errClaimEnded = errors.New("idemkit: claim already finished or detached")

// FenceFromContext returns the fence of the claim a guarded function runs under. Use it to condition
// the function's own writes (UPDATE ... WHERE fence < ?) so a stale attempt cannot overwrite a newer one.
//
// In Execute and Mark modes it is the fence of the claim already written. In Tx modes ([Guard.Tx],
// [Guard.DoTx]) the record is written once, after the function, so it is the fence the record is
// going to get: 1 for a new key, the stored fence + 1 when a failed or abandoned record is there.
// [Guard.Tx] reads the record before the function unless the Locker's cache answers for the key;
// when it does (the cache holds every finished result, but not a failed or abandoned record), the
// first FenceFromContext in the function reads the record in the function's transaction, locking a
// record it finds — two statements more when there is one, one when not, only for functions that ask;
// on SQLite that read makes the transaction a reader before it writes, so open the database with
// _txlock=immediate as for [Guard.DoTx] — and when that read fails, it reports no fence
// and the call fails with ErrStoreUnavailable, its writes rolled back. When another attempt's record
// appears while the function runs and this call takes it over (it failed, expired, or its lease ran
// out), the record commits with a higher fence, reported in [Result.Fence]; the business writes and
// the record still commit together.
func FenceFromContext(ctx context.Context) (int64, bool) {
	switch f := ctx.Value(fenceKey{}).(type) {
	case int64:
		return f, true
	case *lazyFence:
		return f.get()
	}
	return 0, false
}

// lazyFence is the fence of a Guard.Tx call whose record was not read before its function: the
// record is read (in the function's transaction, locking it) when the function first asks for the
// fence, so that the fence is the one the record commits with — above a failed or abandoned record's.
type lazyFence struct {
	mu         sync.Mutex
	ctx        context.Context
	tx         TxStore // the transaction to read in; nil once read, or once the function returned
	scope, key string
	fence      int64
	ok         bool
	found      *Record // what read found: the record to take over
	readErr    error   // what read failed with: the call fails
}

// get returns the fence, reading the record the first time it is asked.
func (l *lazyFence) get() (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tx != nil {
		cur, err := l.read()
		l.tx = nil
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			l.readErr, l.ok = err, false
		default:
			l.found, l.fence = cur, cur.Fence+1
		}
	}
	return l.fence, l.ok
}

// read reads the record in the transaction. A plain read first: a locking read of a missing row takes
// a gap lock on InnoDB, and transactions of new keys in one gap then deadlock on their records'
// INSERTs. Only a record found is locked.
func (l *lazyFence) read() (*Record, error) {
	if p, ok := l.tx.(Peeker); ok {
		if _, err := p.Peek(l.ctx, l.scope, l.key); err != nil {
			return nil, err
		}
	}
	return l.tx.Get(l.ctx, l.scope, l.key)
}

// close ends the reads once the function returned, and returns what the read found or failed with.
func (l *lazyFence) close() (*Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tx = nil
	return l.found, l.readErr
}

// run executes fn under the claim and finishes it. A panic in fn finishes the claim as a retryable
// failure (in a caller's transaction it only releases the lock: the rollback removes the claim) and
// goes on.
func (cl *Claim) run(fn Func) (res Result, err error) {
	val, ferr := cl.call(nil, fn)
	return cl.Finish(cl.ctx, val, ferr)
}

// call runs fn on the claim's context (the fence, and the watchdog when Options.Watchdog is set). A
// panic in fn rolls tx back, when there is one, and aborts the claim (see abort) before it goes on.
func (cl *Claim) call(tx TxStore, fn Func) ([]byte, error) {
	ctx := cl.Context(cl.ctx)
	stop := func() {}
	if cl.g.opts.Watchdog {
		ctx, stop = cl.watch(ctx)
	}
	sealer, _ := tx.(TxSealer)
	if sealer != nil {
		sealer.SealTx(true) // the transaction is the Guard's to end, after the record is in it
	}
	panicked := true
	defer func() {
		if panicked {
			stop()
			if cl.lazy != nil {
				_, _ = cl.lazy.close() // no read through the transaction rolled back below
			}
			if sealer != nil {
				sealer.SealTx(false)
			}
			if tx != nil {
				_ = tx.Rollback()
			}
			cl.abort()
		}
	}()
	val, ferr := fn(ctx)
	if ferr != nil {
		// Described here, where a panic is the function's: an error whose Error panics (a nil *T
		// returned as a non-nil error) would otherwise panic when its text is recorded, with the
		// claim held and the transaction open.
		_ = ferr.Error()
	}
	panicked = false
	if sealer != nil {
		sealer.SealTx(false)
	}
	if ferr != nil && ctx.Err() != nil && endedWork(ferr) {
		// The function's context ended — the watchdog cancelled it (ErrLockLost), or the caller
		// left — and it returned that: no failure of the business, retryable whatever
		// Options.IsPermanent says. Checked before stop, which cancels ctx.
		if cause := context.Cause(ctx); errors.Is(cause, ErrLockLost) && !errors.Is(ferr, ErrLockLost) {
			// The watchdog's, answered with the context's error (ctx.Err()): say why, or a caller
			// who cancelled nothing gets a bare context.Canceled.
			ferr = fmt.Errorf("%w: %w", cause, ferr)
		}
		if !IsRetryable(ferr) {
			ferr = Retryable(ferr)
		}
	}
	stop()
	return val, ferr
}

// endedWork reports whether err is the error of a work context that ended: its cancellation, its
// deadline, or the ErrLockLost cause the watchdog cancels it with.
func endedWork(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrLockLost)
}

// errPanicked is the outcome of a function that panicked: retryable whatever Options.IsPermanent says.
var errPanicked = Retryable(errors.New("idemkit: panic in guarded function"))

// abort finishes a claim whose function panicked. In Tx mode and in a caller's transaction nothing
// of the call is left to undo but the lock (the transaction's rollback removes the rest).
func (cl *Claim) abort() {
	if cl.done {
		return
	}
	if cl.callerTx || cl.mode == ModeTx {
		cl.done = true
		cl.ev.Err = errPanicked
		ctx, cancel := cl.detached(cl.ctx)
		defer cancel()
		cl.releaseLock(ctx, nil, 0)
		cl.g.report(cl.ctx, &cl.ev, cl.rawKey, cl.end, cl.start)
		return
	}
	_, _ = cl.Finish(cl.ctx, nil, errPanicked)
}

// Finish records the outcome of the claimed work and releases the lock: SUCCEEDED with value when err
// is nil (with the claim's [Call.Result] when value is nil), REJECTED when Options.IsPermanent(err),
// FAILED otherwise. The write runs on a context that survives ctx's cancellation, bounded by
// Options.FinishTimeout (in Tx mode, on ctx itself). When the work outlasted Options.TTL from the
// claim, the outcome counts for TTL from the finish (in Mark mode a success then writes the mark's
// expiry; it writes nothing otherwise).
//
// It returns value (nil when empty, as every replay returns it) and err as given, or ErrFenced when
// the record is no longer the claim's — taken over by a newer attempt, ended by a sweeper or an
// operator, deleted, settled by another; the error says which as far as a read of the record tells
// (the outcome was not stored), or ErrStoreUnavailable when the write failed (outside a caller's
// transaction the outcome is then written again in the background, fenced on the claim, until it
// lands or the claim's lease ends, a minute at most, and the call's lock is held until then, so that
// a retry meanwhile is in flight rather than meeting the record as the claim left it), joined with
// err if any. When
// the Store refuses the outcome's values (ErrUnstorable: a result too large for its column), the
// record is finished REJECTED — FAILED for a retryable err — without a result and with an error saying
// why, so the work is never run again, and Finish returns ErrUnstorable joined with err.
func (cl *Claim) Finish(ctx context.Context, value []byte, err error) (Result, error) {
	if cl.done {
		return Result{}, errClaimEnded
	}
	cl.done = true
	g := cl.g
	// One context for the writes that must survive the caller's cancellation: the record (outside a
	// caller's transaction, which decides for it) and the lock release. Made only when needed.
	var dctx context.Context
	cancel := func() {}
	defer func() { cancel() }()
	survive := func() context.Context {
		if dctx == nil {
			dctx, cancel = cl.detached(ctx)
		}
		return dctx
	}
	now := g.opts.Now()
	next := cl.rec
	next.UpdatedAt = now
	permanent := g.IsPermanent(err)
	outcome(&next, value, err, permanent)
	outlived := cl.outlived(&next, now)

	wctx := ctx
	if !cl.callerTx && !(cl.mode.marks() && err == nil && !outlived) {
		wctx = survive()
	}

	var werr, note error
	var write func(context.Context) error // the finish's write, should it have to be tried again
	var want *Record                      // what the write wrote, when it was the record's update
	switch {
	case cl.mode.marks() && err == nil:
		// The mark written by the claim already says SUCCEEDED. In a caller's transaction (MarkTx)
		// it commits after fn: not expired by then (see keepMark). Outside one, a mark the
		// function outlasted is moved to count TTL from now (see outlived).
		switch {
		case cl.callerTx:
			werr = cl.keepMark(wctx, cl.st)
			next.ExpiresAt = cl.rec.ExpiresAt
		case outlived:
			moved, prev := next, cl.rec.Version()
			write = func(ctx context.Context) error { n := moved; return cl.st.Update(ctx, &n, prev) }
			werr, want = write(wctx), &next
		}
	case cl.mode.marks() && !permanent && cl.callerTx:
		// In a transaction (MarkTx, TxMark) the mark rolls back with the function's writes; deleting
		// it there too leaves the key free should the caller commit regardless. Outside one (Mark),
		// the function's effects stand, so the mark is finished FAILED like a claim (the default
		// case): the retry takes it over at the next fence, greater than any the failed attempt may
		// have conditioned a write on.
		//
		// That removal is the best the call can do, not part of its outcome: the caller rolls back on
		// the error, as MarkTx's contract says, and the mark goes with the function's writes. When it
		// fails — as it always does on PostgreSQL after the business statement whose failure fn
		// returns, which aborted the transaction — fn's error stays the answer alone (as DoTx's
		// does): no store outage, and a write conflict of the business stays one.
		mine := cl.rec
		if derr := cl.st.Delete(wctx, mine.Scope, mine.Key, mine.Version()); derr != nil {
			g.opts.Logger.WarnContext(ctx, "idemkit: removing the mark of a failed function in the caller's transaction (its rollback removes it)",
				"scope", cl.ev.Scope, "error", derr)
		}
	default:
		out, prev := next, cl.rec.Version()
		write = func(ctx context.Context) error { n := out; _, err := writeOutcome(ctx, cl.st, &n, prev); return err }
		note, werr = writeOutcome(wctx, cl.st, &next, prev)
		want = &next
	}
	fenced := errors.Is(werr, ErrFenced)
	if fenced {
		// Nil when the read finds the record as this write left it: a Store that retried it after
		// its reply was lost met it.
		werr = fencedWhy(wctx, cl.st, &cl.rec, want)
		fenced = werr != nil
	}

	cl.ev.Outcome, cl.ev.Fence, cl.ev.Status = OutcomeExecuted, next.Fence, next.Status
	var cached []byte
	var ttl time.Duration
	switch {
	case werr == nil:
		cl.rec = next
		if !cl.callerTx && next.Status.Terminal() {
			if cl.mode.marks() {
				next.Response = nil
			}
			cached, ttl = g.cacheEntry(&next, now)
		}
	case fenced:
		cl.ev.Fenced = true
		cl.ev.Status = "" // the outcome was not written, and the record is no longer the claim's
		werr = fmt.Errorf("%w; this outcome was not recorded", werr)
	default:
		// Finish's caller is the one waiting for the answer (Begin's may have left long ago).
		werr = storeErr(ctx, "finishing record", werr)
		cl.ev.Status = cl.rec.Status // the outcome was not written: the record stays as it was
		if !cl.callerTx {
			cl.unwritten(func(ctx context.Context) (*Record, error) { return nil, write(ctx) })
		}
	}
	if cl.locked {
		cl.releaseLock(survive(), cached, ttl)
	}

	res := Result{Value: answered(value), Fence: cl.rec.Fence}
	if err == nil {
		res.Value = answered(next.Response) // value, or the result stored with the claim
	}
	if werr = cmp.Or(werr, note); werr != nil {
		res = Result{}
		err = errors.Join(werr, err)
	}
	cl.ev.Err = err
	g.report(cl.ctx, &cl.ev, cl.rawKey, cl.end, cl.start)
	return res, err
}

// outlived moves the expiry of next, the outcome a claim is finishing with at now (outside a
// caller's transaction), to Options.TTL from now when the function outlasted the TTL its claim
// counted from: written as the claim left it, the record would be expired already, or — renewed by
// the watchdog — expire with the last renewal's lease, and the duplicate right after the answer would
// run the work again. It reports whether it moved it. A record still within the TTL of its claim is
// left as it is.
func (cl *Claim) outlived(next *Record, now time.Time) bool {
	return !cl.callerTx && cl.g.outlived(&cl.rec, next, now)
}

// outlived moves the expiry of next, the outcome of the claim claimed written at now, to Options.TTL
// from now when the claim is older than TTL, and reports whether it did (see Claim.outlived).
func (g *Guard) outlived(claimed, next *Record, now time.Time) bool {
	if now.Before(claimed.CreatedAt.Add(g.opts.TTL)) {
		return false
	}
	next.ExpiresAt = now.Add(g.opts.TTL)
	return true
}

// Detach releases the lock and leaves the record PROCESSING, for work whose outcome is settled
// elsewhere (a reconciler asking the transaction manager). Duplicates keep getting ErrInFlight until
// then: a record with a GID is never taken over, one without is taken over once its lease runs out.
func (cl *Claim) Detach(ctx context.Context) {
	if cl.done {
		return
	}
	cl.done = true
	dctx, cancel := cl.detached(ctx)
	defer cancel()
	cl.releaseLock(dctx, nil, 0)
	cl.ev.Outcome, cl.ev.Fence, cl.ev.Status = OutcomeDetached, cl.rec.Fence, cl.rec.Status
	cl.g.report(ctx, &cl.ev, cl.rawKey, cl.end, cl.start)
}

// Extend renews the claim: the lock to Options.LockTTL and, outside Tx and Mark mode, the record's lease
// to Options.Lease from now (in Mark mode, the mark's expiry when it would come sooner). It returns
// ErrFenced when the claim was lost, and Locker or Store errors as they come (a Locker error is
// ignored under Options.FailOpen). On a claim already finished or detached it returns an error and
// changes nothing.
//
// In Execute and Mark mode the record, written before the work, is the claim: a lock that ran out
// (LockTTL shorter than the work) does not end it. Extend then renews the record with a fenced write
// — ErrFenced when it is no longer the claim's — and takes the lock again when it is free. In the Tx
// modes the transaction decides the claim (its record or mark conflicts with any other attempt's at the
// latest when it commits): a lock the Locker lost (a Redis restart) is taken again when it is free, and
// ErrLockNotHeld means another attempt holds it, or finished the key, meanwhile; an Acquire that fails
// taking it again is a Locker error like any other. Under Options.FailOpen, renewing a record (Execute
// and Mark mode), the Locker gets at most half the time left to ctx's deadline, and the Store the rest:
// a Redis that does not answer cannot spend the time the record's renewal needs.
func (cl *Claim) Extend(ctx context.Context) error {
	if cl.done {
		return errClaimEnded
	}
	g := cl.g
	recorded := !cl.callerTx && (cl.mode == ModeExecute || cl.mode == ModeMark)
	lockLost := false
	if cl.locked {
		lctx, cancel := cl.lockerShare(ctx, recorded)
		err := g.opts.Locker.Refresh(lctx, cl.id.lockKey, cl.token, g.opts.LockTTL)
		if errors.Is(err, ErrLockNotHeld) && !recorded {
			// Taken again, or the failure of taking it: a Locker error like the Refresh's own.
			err = cl.relock(lctx, err)
		}
		cancel()
		if err != nil {
			switch {
			case errors.Is(err, ErrLockNotHeld) && recorded:
				lockLost = true
			case errors.Is(err, ErrLockNotHeld) || !g.opts.FailOpen:
				return err
			default:
				cl.ev.FailOpen = true
			}
		}
	}
	if err := cl.renew(ctx, lockLost); err != nil {
		return err
	}
	if lockLost {
		// The record is still the claim's: take the lock again if nobody holds it, so duplicates are
		// turned away without reading the Store. Another attempt's lock stays; it meets the record.
		_, _ = g.opts.Locker.Acquire(ctx, cl.id.lockKey, cl.token, g.opts.LockTTL)
	}
	return nil
}

// lockerShare returns the context for the Locker's part of a renewal (see Extend) on ctx: for a claim
// whose record the renewal writes (recorded) under Options.FailOpen, where the Locker's errors are
// ignored, it ends halfway to ctx's deadline, so that a Redis that does not answer (stopped, cut off
// without a reset, blocked by a slow command) leaves the Store's renewal of the record the other half;
// otherwise it is ctx.
func (cl *Claim) lockerShare(ctx context.Context, recorded bool) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !recorded || !cl.g.opts.FailOpen || !ok {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, time.Now().Add(time.Until(d)/2))
}

// relock takes the lock of a claim written in a transaction (the Tx modes: its record, or its mark,
// is written in the transaction and commits with it) again after the Locker lost it — Redis restarted
// or flushed, the key evicted — a Refresh having answered notHeld. Such a claim's outcome is decided
// by its transaction, whose record (or mark) conflicts with any other attempt's, not by the lock, which
// only turns duplicates away early: its function carries on, and relock returns nil. It returns
// notHeld when another attempt holds the lock or the key is finished (cached) by then: the function
// races that attempt, and the watchdog stops it as when the lock is lost. When the Acquire itself
// fails (Redis answered the Refresh, not the Acquire), it returns that error, a Locker error as a
// failed Refresh is: ignored under FailOpen, tried again at the next renewal without it.
func (cl *Claim) relock(ctx context.Context, notHeld error) error {
	cached, err := cl.g.opts.Locker.Acquire(ctx, cl.id.lockKey, cl.token, cl.g.opts.LockTTL)
	switch {
	case err == nil && cached == nil:
		return nil
	case err == nil || errors.Is(err, ErrLocked):
		return notHeld
	}
	return fmt.Errorf("idemkit: taking the lock again after it was lost: %w", err)
}

// renew renews the claim's record (see Extend); confirm writes it even when nothing needs moving, to
// learn whether it is still the claim's. A fenced renewal returns ErrFenced saying why (see
// fencedWhy).
func (cl *Claim) renew(ctx context.Context, confirm bool) error {
	g := cl.g
	next := cl.rec
	switch cl.mode {
	case ModeExecute:
	case ModeMark:
		// A mark says SUCCEEDED from its claim on, so only its expiry can free the key while the
		// function runs (a duplicate takes an expired record over, the sweeper deletes it): keep the
		// expiry ahead of the renewal, as a claim's.
		until := g.opts.Now().Add(g.opts.Lease)
		if next.ExpiresAt.IsZero() || !next.ExpiresAt.Before(until) {
			if !confirm {
				return nil
			}
			until = next.ExpiresAt
		}
		next.ExpiresAt, next.UpdatedAt = until, g.opts.Now()
		return cl.renewTo(ctx, &next)
	default:
		return nil
	}
	next.LeaseUntil = g.opts.Now().Add(g.opts.Lease)
	next.UpdatedAt = g.opts.Now()
	if !next.ExpiresAt.IsZero() && next.ExpiresAt.Before(next.LeaseUntil) {
		// A claim renewed longer than Options.TTL (a watchdog, up to MaxHold) must not expire while
		// its lease is alive: the sweeper would delete it and a duplicate would take it over.
		next.ExpiresAt = next.LeaseUntil
	}
	return cl.renewTo(ctx, &next)
}

// renewTo writes next, the claim's record renewed, fenced on the claim: ErrFenced saying why (see
// fencedWhy) when the record is no longer the claim's.
func (cl *Claim) renewTo(ctx context.Context, next *Record) error {
	err := cl.st.Update(ctx, next, cl.rec.Version())
	if errors.Is(err, ErrFenced) {
		err = fencedWhy(ctx, cl.st, &cl.rec, next)
	}
	if err != nil {
		return err
	}
	cl.rec = *next
	return nil
}

// claimed notes in the call's event how long getting the claim took.
func (cl *Claim) claimed() {
	if !cl.start.IsZero() {
		cl.ev.ClaimDuration = cl.g.opts.Now().Sub(cl.start)
	}
}

// replay answers with a finished record read from the Store, cached when the lock is released.
func (cl *Claim) replay(r *Record, fingerprint string) (*Claim, Result, error) {
	return cl.replayed(r, fingerprint, r)
}

// replayCached answers with a finished record from the cache. It takes the record by value and keeps
// nothing of it, so the caller's copy stays on its stack.
func (cl *Claim) replayCached(r Record, fingerprint string) (*Claim, Result, error) {
	return cl.replayed(&r, fingerprint, nil)
}

// replayed answers with r; cacheable is r when it may be cached (read from the Store), else nil.
func (cl *Claim) replayed(r *Record, fingerprint string, cacheable *Record) (*Claim, Result, error) {
	if otherPayloadThan(fingerprint, r.Fingerprint) {
		return cl.fail(OutcomeMismatch, ErrPayloadMismatch)
	}
	cl.ev.Fence, cl.ev.Status = r.Fence, r.Status
	if cl.mode.marks() {
		return cl.fail(OutcomeDuplicate, ErrDuplicate) // never cached: see begin
	}
	if !cl.callerTx && !r.IsMark() {
		// Read through the caller's transaction, the record may not be committed (a second call in
		// the same transaction, which may still roll back): only a committed record may be cached.
		// Nor is a mark, written by a Mark-mode call of the same key (one mode per scope is the
		// rule): it says SUCCEEDED while its function may still run and fail, and only that call
		// may cache it.
		cl.cacheable = cacheable
	}
	var err error
	if r.Status == StatusRejected {
		err = &RejectedError{Message: r.Error}
	}
	cl.finishEarly(OutcomeReplayed, err)
	return nil, Result{Value: r.Response, Replayed: true, Fence: r.Fence}, err
}

// fail ends a call that did not get a claim.
func (cl *Claim) fail(o Outcome, err error) (*Claim, Result, error) {
	cl.finishEarly(o, err)
	return nil, Result{}, err
}

func (cl *Claim) finishEarly(o Outcome, err error) {
	cl.done = true
	if cl.locked {
		var cached []byte
		var ttl time.Duration
		if cl.cacheable != nil {
			cached, ttl = cl.g.cacheEntry(cl.cacheable, cl.g.opts.Now())
		}
		ctx, cancel := cl.detached(cl.ctx)
		defer cancel()
		cl.releaseLock(ctx, cached, ttl)
	}
	cl.ev.Outcome, cl.ev.Err = o, err
	cl.g.report(cl.ctx, &cl.ev, cl.rawKey, cl.end, cl.start)
}

// cacheEntry returns the cached form of a finished record and how long to cache it at now, or nil
// when there is no cache or the record is about to expire.
func (g *Guard) cacheEntry(r *Record, now time.Time) ([]byte, time.Duration) {
	if g.opts.Locker == nil {
		return nil, 0
	}
	ttl := g.cacheTTL(r, now)
	if ttl <= 0 {
		return nil, 0
	}
	return encodeCached(r), ttl
}

// detached returns a context for the writes after the function: one that survives ctx's
// cancellation, bounded by Options.FinishTimeout. A ctx that can never be cancelled is used as is.
func (cl *Claim) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), cl.g.opts.FinishTimeout)
}

// releaseLock unlocks, and caches result for ttl when result is not nil, on ctx (from detached).
func (cl *Claim) releaseLock(ctx context.Context, result []byte, ttl time.Duration) {
	if !cl.locked {
		return
	}
	cl.locked = false
	g := cl.g
	var until time.Time // when the result's time to live ends, should the release have to be retried
	if result != nil {
		until = g.opts.Now().Add(ttl)
	}
	err := g.opts.Locker.Release(ctx, cl.id.lockKey, cl.token, result, ttl)
	switch {
	case err == nil:
	case errors.Is(err, ErrLockNotHeld):
		g.opts.Logger.DebugContext(ctx, "idemkit: lock expired before release", "scope", cl.ev.Scope)
	default:
		g.opts.Logger.WarnContext(ctx, "idemkit: releasing lock", "scope", cl.ev.Scope, "error", err)
		if g.opts.FailOpen {
			cl.ev.FailOpen = true
		}
		cl.retryRelease(result, until)
	}
}

// retryRelease tries again, in the background, a release that failed (a connection Redis dropped, a
// client that does not retry): its lock would otherwise stay until LockTTL ran out, answering "in
// flight" to every duplicate of a key whose outcome is stored, and the result it was to cache would
// be missing from a cache that vouches for the keys it does not hold. It retries with a backoff (10 ms
// doubling, up to a second) for FinishTimeout, until Redis answers; the result's time to live shrinks
// as time passes (it ends at until, where the first release's would have), so it never outlives its
// record, and once none is left only the lock is released. At most maxWatches run at once per Guard.
func (cl *Claim) retryRelease(result []byte, until time.Time) {
	cl.g.retryRelease(cl.ctx, cl.id.lockKey, cl.token, result, until)
}

// retryRelease is Claim.retryRelease for the lock key held by token, with ctx's values.
func (g *Guard) retryRelease(ctx context.Context, key, token string, result []byte, until time.Time) {
	g.retries.Retry(ctx, g.opts.FinishTimeout, func(ctx context.Context) bool {
		res, left := result, until.Sub(g.opts.Now())
		if left <= 0 {
			res = nil
		}
		err := g.opts.Locker.Release(ctx, key, token, res, left)
		return err == nil || errors.Is(err, ErrLockNotHeld)
	})
}

// answered is the Value of a first call's answer (a success's stored result, a rejection's value):
// nil when empty, as every replay returns it (no Store tells an empty result from none).
func answered(result []byte) []byte {
	if len(result) == 0 {
		return nil
	}
	return result
}

// outcome writes a finished attempt's status, result and error into next, the claim's record: a
// success without a value of its own keeps the result stored with the claim ([Call.Result]).
func outcome(next *Record, value []byte, err error, permanent bool) {
	switch {
	case err == nil:
		if value != nil {
			next.Response = value
		}
		next.Status, next.Error = StatusSucceeded, ""
	case permanent:
		next.Status, next.Response, next.Error = StatusRejected, value, errorText(err)
	default:
		next.Status, next.Response, next.Error = StatusFailed, nil, errorText(err)
	}
}

// maxErrorText bounds the error message stored on a record, in bytes.
const maxErrorText = 1024

// errorText is err's message as a record stores it: valid UTF-8 without NUL bytes (which PostgreSQL
// text refuses), cut on a rune boundary to at most maxErrorText bytes.
func errorText(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if len(s) > maxErrorText {
		cut := maxErrorText
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// writeOutcome updates the record to next if it is still at prev. When the Store refuses next's values
// (ErrUnstorable: a result too large for its column...), leaving the record PROCESSING would let it be
// taken over and its work run a second time: it stores instead what the Store can hold — no result, a
// short error saying why, REJECTED for a success or a permanent failure (the work ran and must not
// run again), FAILED for a retryable failure — updates next to it, and returns a note saying so (also
// with that write's error).
func writeOutcome(ctx context.Context, st Store, next *Record, prev Version) (note, err error) {
	err = st.Update(ctx, next, prev)
	if !errors.Is(err, ErrUnstorable) {
		return nil, err
	}
	refused := err
	if next.Status != StatusFailed {
		next.Status = StatusRejected
	}
	next.Response = nil
	next.Error = errorText(fmt.Errorf("idemkit: the outcome could not be stored: %w", refused))
	note = fmt.Errorf("%w: recorded as %s without its result: %w", ErrUnstorable, next.Status, refused)
	if err = st.Update(ctx, next, prev); err != nil {
		// The note too: a fenced write the caller finds was its own (see fencedWhy) did record it.
		return note, errors.Join(refused, err)
	}
	return note, nil
}

// Settle writes the outcome of a record left PROCESSING by a detached claim, once that outcome is
// known elsewhere — typically a reconciler asking a transaction manager about the record's GID. rec is
// the record as read from the Store (or [Claim.Record]); the write is conditioned on its version, so
// it fails with ErrFenced when the record was finished, taken over or recovered since. value and err
// are classified as in [Claim.Finish]: a success with a nil value keeps the result stored with the
// claim ([Call.Result]); a record settled more than Options.TTL after its claim counts for TTL from
// the settlement. The result cache is filled by the first replay, not here. When the Store
// refuses the outcome's values it stores a replacement as [Claim.Finish] does and returns an error
// wrapping ErrUnstorable.
//
// With a Locker, once the outcome is written, Settle releases the lock the record's holder may still
// hold (by its token, the record's owner): a holder that died before it could detach (an initiator
// killed after its submit) keeps its lock until LockTTL, which may outlast the lease, and every
// duplicate of the settled key would be answered in flight until then. A lock another attempt holds is
// left alone; a release that fails (bounded by Options.FinishTimeout) leaves the lock to expire and is
// not reported. Once 3 such releases in a row failed (a Redis that stopped answering), Settle no longer
// waits for them: each is made in the background (see [Guard.Wait]), at most 64 at once (the locks of
// the others expire by themselves), until one succeeds.
func (g *Guard) Settle(ctx context.Context, rec *Record, value []byte, err error) error {
	if rec == nil || rec.Status != StatusProcessing {
		return fmt.Errorf("%w: only a PROCESSING record can be settled", ErrFenced)
	}
	now := g.opts.Now()
	next := *rec
	next.UpdatedAt = now
	outcome(&next, value, err, g.IsPermanent(err))
	g.outlived(rec, &next, now) // settled after TTL (a transaction unsettled for long): counts from now
	note, werr := writeOutcome(ctx, g.store, &next, rec.Version())
	if errors.Is(werr, ErrFenced) {
		// Nil when the read finds the record as this settlement left it (see fencedWhy).
		if werr = fencedWhy(ctx, g.store, rec, &next); werr != nil {
			return werr
		}
	}
	if werr != nil {
		return storeErr(ctx, "settling record", werr)
	}
	g.releaseHolder(ctx, rec)
	return note
}

// maxHolderFailures is how many releases of settled records' holders' locks in a row may fail before
// Settle stops waiting for them (see Guard.releaseHolder).
const maxHolderFailures = 3

// releaseHolder releases the lock that rec's holder (its owner's token) may still hold, once another
// settled the record: see [Guard.Settle]. Once maxHolderFailures such releases in a row failed (a
// Redis that stopped answering makes each wait for FinishTimeout, and a reconciler settles its records
// in turn: a backlog of 500 would hold its pass for 500 times that), it releases in the background
// instead, at most maxWatches at once (the rest expire by themselves), until one succeeds.
func (g *Guard) releaseHolder(ctx context.Context, rec *Record) {
	if g.opts.Locker == nil || rec.Owner == "" {
		return
	}
	scope, key, owner := rec.Scope, LockKey(rec.Scope, rec.Key), rec.Owner // rec is the caller's again once Settle returns
	release := func(ctx context.Context) {
		err := g.opts.Locker.Release(ctx, key, owner, nil, 0)
		if err != nil && !errors.Is(err, ErrLockNotHeld) {
			g.holderFailures.Add(1)
			g.opts.Logger.WarnContext(ctx, "idemkit: releasing the lock of a settled record's holder", "scope", scope, "error", err)
			return
		}
		g.holderFailures.Store(0)
	}
	if g.holderFailures.Load() >= maxHolderFailures {
		g.holders.Go(ctx, g.opts.FinishTimeout, release)
		return
	}
	rctx, cancel := context.WithTimeout(ctx, g.opts.FinishTimeout) // a Redis that hangs delays no settlement longer
	defer cancel()
	release(rctx)
}

// fencedWhy returns ErrFenced for a write of want (nil: one it cannot tell) fenced off the record
// mine (as its writer last had it), saying what became of the record as far as a read of it can
// tell: deleted, deleted and claimed anew, taken over by another attempt (one with a GID: settled by
// a reconciler or an operator, then claimed again), ended by a sweeper or an operator (the error
// they wrote), or finished by another writer with the same claim (a reconciler's Settle). It returns
// nil when the record read is want (see wrote): a Store that retries an UPDATE whose reply was lost
// (record.Store checks its own) meets the write its first try made and answers ErrFenced, although
// the write landed.
func fencedWhy(ctx context.Context, st Store, mine, want *Record) error {
	cur, err := st.Get(ctx, mine.Scope, mine.Key)
	var why string
	switch {
	case err == nil && want != nil && wrote(cur, want):
		return nil
	case errors.Is(err, ErrNotFound):
		why = "the record was deleted (purged, or expired and swept)"
	case err != nil:
		why = fmt.Sprintf("the record changed since (reading it failed: %v)", err)
	case cur.Fence == mine.Fence && cur.Owner == mine.Owner:
		why = fmt.Sprintf("the record was finished by another as %s (a reconciler's settlement)", cur.Status)
	case cur.Fence > mine.Fence && cur.Owner == "":
		why = fmt.Sprintf("the claim was ended by a sweeper or an operator (the record is %s, fence %d: %q)", cur.Status, cur.Fence, cur.Error)
	case cur.Fence > mine.Fence && mine.GID != "":
		// A record with a GID is never taken over when its lease runs out (see Claim.Detach): it was
		// settled first — by a reconciler, which fences the gid, or an operator — then claimed again.
		why = fmt.Sprintf("the record (gid %s) was settled by another (a reconciler, which fences the gid, or an operator) and claimed again by another attempt (fence %d)", mine.GID, cur.Fence)
	case cur.Fence > mine.Fence:
		why = fmt.Sprintf("the lease ran out and another attempt took over (fence %d)", cur.Fence)
	default: // another owner with a fence no higher: the record was deleted, then claimed anew
		why = fmt.Sprintf("the record was deleted and claimed again by another attempt (fence %d)", cur.Fence)
	}
	return fmt.Errorf("%w: %s", ErrFenced, why)
}

// wrote reports whether cur, a record read, is the claim's own write of want (a finish, a renewal, a
// settlement, which keep its fence and owner): it has want's version — a fence and an owner token
// another writer never reuses, a status another's settlement or takeover changes — and the values
// want wrote, its times to the millisecond (no Store keeps less).
func wrote(cur, want *Record) bool {
	return cur.Version() == want.Version() && cur.Error == want.Error && bytes.Equal(cur.Response, want.Response) &&
		sameMilli(cur.LeaseUntil, want.LeaseUntil) && sameMilli(cur.ExpiresAt, want.ExpiresAt) &&
		sameMilli(cur.UpdatedAt, want.UpdatedAt)
}

// sameMilli reports whether a and b are the same instant as a Store with millisecond precision keeps
// them (truncated or rounded), or both unset.
func sameMilli(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() == b.IsZero()
	}
	d := a.Sub(b)
	return d > -time.Millisecond && d < time.Millisecond
}
