package idemkit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/internal/background"
)

// Guard runs functions at most once per (scope, key) and replays their results to duplicates.
// A Guard is safe for concurrent use; create one per Store and share it.
type Guard struct {
	store Store
	opts  Options
	// watches run the watches for abandoned claims (see Claim.abandoned).
	watches background.Limit
	// failed run the watches for claims whose write failed while the caller still waited (see
	// Claim.abandoned): apart from watches, which a database refusing connections would fill (every
	// call fails at once, its claim never sent), so that a claim whose caller left, and which lands
	// afterwards, still gets its watch.
	failed background.Limit
	// forgets run the releases of locks whose Acquire failed (see Claim.forgetLock).
	forgets background.Limit
	// retries run the retries of releases that failed (see Claim.retryRelease): apart from forgets,
	// which a Redis outage fills (every call's Acquire fails), so that the lock and result of a call
	// that finished still get their retry.
	retries background.Limit
	// rewrites run the rewrites of finishes whose write failed (see Claim.unwritten): apart from
	// watches, which a stalled store fills (every caller that gives up leaves an abandoned claim), so
	// that the outcome of a call that finished still gets written.
	rewrites background.Limit
	// holders run the releases of settled records' holders' locks once the Locker failed them
	// (see Guard.releaseHolder); holderFailures counts those that failed in a row.
	holders        background.Limit
	holderFailures atomic.Int32
}

// MaxKeyLen is the longest key or scope the Guard accepts, in bytes (Options.MaxKeyLen).
func (g *Guard) MaxKeyLen() int { return g.opts.MaxKeyLen }

// Now returns the time by the Guard's clock (Options.Now), the clock its records' leases and expiry
// are written and judged by: code that judges a record the Guard wrote ([Record.LeaseExpired],
// [Record.Expired]) as the Guard would must use it.
func (g *Guard) Now() time.Time { return g.opts.Now() }

// New returns a Guard over store, configured by opts (nil for defaults). It returns an error when
// store is nil or an option is invalid.
func New(store Store, opts *Options) (*Guard, error) {
	if store == nil {
		return nil, errors.New("idemkit: nil Store")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Guard{store: store, opts: o, watches: background.Limit{Max: maxWatches}, failed: background.Limit{Max: maxWatches},
		forgets: background.Limit{Max: maxWatches}, retries: background.Limit{Max: maxWatches},
		rewrites: background.Limit{Max: maxWatches}, holders: background.Limit{Max: maxWatches}}, nil
}

// Wait waits until the work the Guard runs in the background after its calls answered has ended, or
// ctx ends (its error returned): a finish or a failed mark's release written again after its write
// failed, a lock released again after its release failed, a claim that landed after its caller left
// watched and released, the lock of a settled record's holder released (see [Guard.Settle]). Each
// lasts until it succeeds or its claim's lease ends (a minute at most). Call
// it at a graceful shutdown, once the Guard's calls have returned, before the process exits (and
// before closing the Store's database and the Locker's client): the process would otherwise cut that
// work short, and a key whose outcome was not written would run again once its lease ran out. Calls
// made while it waits may add work it then waits for too. The Guard stays usable.
func (g *Guard) Wait(ctx context.Context) error {
	return background.WaitAll(ctx, &g.rewrites, &g.retries, &g.watches, &g.failed, &g.forgets, &g.holders)
}

// Call names one guarded operation.
type Call struct {
	// Scope is the business type: a route pattern, a queue name, a saga step. Required.
	Scope string
	// Key is the idempotency key, unique per operation within Scope. Required; see Options.MaxKeyLen.
	Key string
	// Fingerprint is a hash of the request payload. When both it and the stored one are set and they
	// differ, the call fails with ErrPayloadMismatch. Optional. Like GID and BranchID it must be at
	// most MaxStoredLen (128) bytes of UTF-8 without NUL, what every Store holds (a hex SHA-256 is
	// 64): any other value fails the call with ErrUnstorable before anything runs ([StorableText]
	// hashes a raw binary or long one).
	Fingerprint string
	// GID and BranchID tie the record to a distributed transaction. A PROCESSING record with a GID is
	// never taken over on lease expiry: its outcome is the global transaction's, settled by hooks or a
	// reconciler. Optional.
	GID      string
	BranchID string
	// Result, when set, is stored with the claim and becomes the record's result when the claim is
	// settled as a success without a value of its own ([Claim.Finish] or [Guard.Settle] with a nil
	// value). It is for work whose answer is known before its outcome, such as the order id and gid of
	// a global transaction: whoever settles the record — the process that started the work, or a
	// reconciler after that process died — has what a replay needs. Ignored in Mark modes. Optional.
	Result []byte
}

// Func is a guarded function. It returns the result bytes stored and replayed on success. Its
// context carries the claim's fence (see [FenceFromContext]).
type Func func(ctx context.Context) ([]byte, error)

// Result is a guarded call's result.
type Result struct {
	// Value is the function's result, or the stored one when Replayed.
	Value []byte
	// Replayed is true when the function did not run and Value (or the error) was stored before.
	Replayed bool
	// Fence is the fence of the claim that produced the result.
	Fence int64
}

// Do runs fn once for c (Execute mode): it claims the record in its own write, runs fn, and records
// the outcome with a fenced update.
//
// It returns fn's result and error on the first run; the stored result with Replayed set (or an
// [*RejectedError] for a stored permanent failure) for a finished key; [*InFlightError] when another
// attempt holds the key; ErrPayloadMismatch, ErrInvalidKey, ErrUnstorable, ErrNilFunc,
// ErrStoreUnavailable, ErrLockUnavailable as documented on each; ErrFenced when fn ran but its claim was taken over (or
// otherwise ended: see [Claim.Finish]) before it finished. A panic in fn releases the claim (FAILED, retry allowed) and continues.
func (g *Guard) Do(ctx context.Context, c Call, fn Func) (Result, error) {
	if fn == nil {
		return Result{}, ErrNilFunc
	}
	cl, res, err := g.begin(ctx, g.store, ModeExecute, &c)
	if cl == nil {
		return res, err
	}
	return cl.run(fn)
}

// Mark runs fn once for c (Mark mode): the key is marked done before fn runs, duplicates get
// ErrDuplicate and nothing is stored or replayed. A retryable error from fn finishes the mark FAILED,
// so a retry takes it over at the next fence and runs (fn's effects stand, and a write conditioned on
// the failed attempt's fence must not refuse the retry's); a permanent one keeps it (REJECTED). Mark
// costs one write on success, but a crash while fn runs (or after the mark's write and before fn, or
// after fn failed and before the mark is finished FAILED) leaves the key marked: use Do or DoTx when
// that matters.
func (g *Guard) Mark(ctx context.Context, c Call, fn func(ctx context.Context) error) error {
	if fn == nil {
		return ErrNilFunc
	}
	cl, _, err := g.begin(ctx, g.store, ModeMark, &c)
	if cl == nil {
		return err
	}
	_, err = cl.run(func(ctx context.Context) ([]byte, error) { return nil, fn(ctx) })
	return err
}

// Begin claims c for work the caller finishes later with [Claim.Finish] (or leaves to a reconciler
// with [Claim.Detach]); it is the primitive under Do for work that does not fit one function call.
// Exactly one of its results is meaningful: a *Claim to run the work under; a Result with Replayed set
// (and possibly an [*RejectedError]) for a finished key; or an error, as for Do.
func (g *Guard) Begin(ctx context.Context, c Call) (*Claim, Result, error) {
	return g.begin(ctx, g.store, ModeExecute, &c)
}

// Get returns the record for scope and key as the Guard stores it (namespace and hashing applied), or
// ErrNotFound, ErrInvalidKey or a Store error.
func (g *Guard) Get(ctx context.Context, scope, key string) (*Record, error) {
	id, err := g.identify(&Call{Scope: scope, Key: key})
	if err != nil {
		return nil, err
	}
	return g.store.Get(ctx, id.scope, id.key)
}

// verdict is what an existing record means for a new attempt.
type verdict uint8

const (
	verdictTakeover verdict = iota
	verdictReplay
	verdictInFlight
	verdictMismatch
	verdictDuplicate
)

// otherPayloadThan reports whether a call with fingerprint is another payload than the one a record
// was written with (stored): both are known and differ. An unknown one on either side never differs.
func otherPayloadThan(fingerprint, stored string) bool {
	return fingerprint != "" && stored != "" && fingerprint != stored
}

// judge applies the state table to an existing, non-claimed record.
func judge(cur *Record, fingerprint string, mode Mode, now time.Time) verdict {
	if cur.Status == StatusProcessing && cur.GID != "" {
		// Tied to a global transaction that nobody has settled yet: its outcome is the transaction's,
		// so neither expiry nor a lapsed lease frees the key; a reconciler settles it.
		if otherPayloadThan(fingerprint, cur.Fingerprint) {
			return verdictMismatch
		}
		return verdictInFlight
	}
	if cur.Status == StatusProcessing && !cur.LeaseExpired(now) && cur.Expired(now) {
		// A claim renewed past its record's expiry (Extend moves the expiry with the lease; a record
		// written before it did): its attempt is alive, and the key is in flight — to the same payload.
		if otherPayloadThan(fingerprint, cur.Fingerprint) {
			return verdictMismatch
		}
		return verdictInFlight
	}
	if cur.Expired(now) {
		return verdictTakeover
	}
	if otherPayloadThan(fingerprint, cur.Fingerprint) {
		return verdictMismatch
	}
	switch cur.Status {
	case StatusSucceeded, StatusRejected:
		if mode.marks() {
			return verdictDuplicate
		}
		return verdictReplay
	case StatusProcessing:
		if !cur.LeaseExpired(now) {
			return verdictInFlight
		}
		return verdictTakeover
	default: // FAILED, or a state this version does not know: run again
		return verdictTakeover
	}
}

// heldForOtherPayload reports whether the attempt holding the key, whose token is holder, runs for
// another payload than a call with fingerprint, to which the key is (or is going to be) bound. One
// whose token does not carry a fingerprint's hash — a call without a fingerprint, which keeps the
// fingerprint of a record it takes over within the record's lifetime (see takeOver), so the key stays
// bound to that payload — is judged by the record, read outside any transaction of the caller's, as a
// call meeting it would be (the record said before the takeover what it says after). One whose hash
// is another fingerprint's is a mismatch unless the record says otherwise: a record that still binds
// the key to this call's payload (or to none the holder's takeover would replace) makes the holder
// the attempt that mismatches — it is about to be told so — and the call is in flight, not refused.
// Either way a read that fails tells nothing: in flight. Only a call with a fingerprint reads, and
// only when the Locker names a holder without a hash or with another payload's.
//
// In the Tx modes (mode.atCommit) only a record that binds the key to another payload is a mismatch:
// their records are written at commit, so no record — or one the holder's takeover would replace —
// says nothing of which payload the key is going to be bound to. The holder has written nothing yet,
// and an earlier attempt of this call's payload may be running uncommitted (one that outlived LockTTL
// without a watchdog, whose retry this call may be): whichever commits first binds the key, and a
// 422 here, final, would refuse the key's own payload should that attempt win. In flight, retryable:
// the retry meets the record.
func (cl *Claim) heldForOtherPayload(holder, fingerprint string) bool {
	other, known := holderOtherPayload(holder, fingerprint)
	if known && !other || fingerprint == "" || holder == "" {
		return other
	}
	cur, err := cl.readOutside()
	if err != nil {
		// No record: the holder writes the key's first, for its payload (not so in the Tx modes,
		// see above). One that could not be read tells nothing — the token says only that the
		// holder's payload is not this call's, not which of the two the key is bound to —: in
		// flight, retryable, rather than a final mismatch.
		return other && errors.Is(err, ErrNotFound) && !cl.mode.atCommit()
	}
	now := cl.g.opts.Now()
	v := judge(cur, fingerprint, cl.mode, now)
	if known && !cl.mode.atCommit() {
		// The holder's payload binds the key when it takes the record over: expired, or one bound to
		// no payload yet.
		return v == verdictMismatch || v == verdictTakeover && (cur.Expired(now) || cur.Fingerprint == "")
	}
	return v == verdictMismatch
}

// begin opens a call and claims its record in st: insert-first, reading only on a conflict.
func (g *Guard) begin(ctx context.Context, st Store, mode Mode, c *Call) (*Claim, Result, error) {
	cl, res, err := g.open(ctx, st, mode, c)
	if cl == nil {
		return nil, res, err
	}
	return cl.claim(c)
}

// open starts a call: it validates c, starts the observer and takes the lock. It returns a Claim
// holding the lock (or none, under fail-open) that has not touched the Store yet; or, with a nil
// Claim, how the call ended: a replay from the cache, in flight, invalid, or the Locker unavailable.
func (g *Guard) open(ctx context.Context, st Store, mode Mode, c *Call) (*Claim, Result, error) {
	cl := &Claim{g: g, st: st, mode: mode, rawKey: c.Key}
	cl.ev = Event{Mode: mode, Scope: c.Scope}
	if g.opts.Observer != nil || g.opts.Logger.Enabled(ctx, slog.LevelWarn) {
		cl.start = g.opts.Now() // only events and logs need the duration; the clock is not free
	}
	if g.opts.Observer != nil {
		ctx, cl.end = g.opts.Observer.Start(ctx, mode, c.Scope)
	}
	cl.ctx = ctx
	id, err := g.identify(c)
	cl.ev.StoredScope = id.scope // also of a call refused for its key: a valid scope keeps its label
	if err != nil {
		return cl.fail(OutcomeInvalid, err)
	}
	cl.id = id
	cl.token = newToken(c.Fingerprint)

	if lk := g.opts.Locker; lk != nil {
		cached, err := lk.Acquire(ctx, id.lockKey, cl.token, g.opts.LockTTL)
		switch {
		case err == nil && cached == nil:
			cl.locked = true
		case err == nil:
			rec, derr := decodeCached(cached)
			if derr == nil {
				cl.ev.Cached = true
				return cl.replayCached(rec, c.Fingerprint)
			}
			g.opts.Logger.WarnContext(ctx, "idemkit: ignoring malformed cached result", "scope", c.Scope)
		case errors.Is(err, ErrLocked):
			if ife := (*InFlightError)(nil); errors.As(err, &ife) && cl.heldForOtherPayload(ife.Holder, c.Fingerprint) {
				// The attempt holding the key runs another payload: as the record would say, once written.
				return cl.fail(OutcomeMismatch, ErrPayloadMismatch)
			}
			return cl.fail(OutcomeInFlight, inFlight(err))
		case ctx.Err() != nil:
			if !errors.Is(err, ErrNotSent) { // an Acquire never sent took no lock: nothing to release
				cl.forgetLock()
			}
			return cl.fail(OutcomeUnavailable, errors.Join(fmt.Errorf("%w: %w", ErrLockUnavailable, err), ctx.Err()))
		case g.opts.FailOpen:
			cl.forgetLock()
			cl.ev.FailOpen = true
		default:
			cl.forgetLock()
			return cl.fail(OutcomeUnavailable, fmt.Errorf("%w: %w", ErrLockUnavailable, err))
		}
	}
	return cl, Result{}, nil
}

// newRecord returns the record a claim of c writes at now: PROCESSING with a lease, or, in the Mark
// modes, SUCCEEDED at once.
func (cl *Claim) newRecord(c *Call, now time.Time) {
	g := cl.g
	cl.rec = Record{
		Scope: cl.id.scope, Key: cl.id.key, Status: StatusProcessing, Fence: 1, Owner: cl.token,
		Fingerprint: c.Fingerprint, GID: c.GID, BranchID: c.BranchID, Response: c.Result,
		LeaseUntil: now.Add(g.opts.Lease), ExpiresAt: now.Add(g.opts.TTL), CreatedAt: now, UpdatedAt: now,
	}
	if cl.mode.marks() {
		cl.rec.Status, cl.rec.LeaseUntil, cl.rec.Response = StatusSucceeded, now, nil
	}
}

// takeOver turns cl.rec into a claim replacing cur at now: a fresh claim that keeps counting fences.
// Within the record's lifetime the payload it was first used with still binds the key, even when
// this call gives none.
func (cl *Claim) takeOver(cur *Record, now time.Time) {
	cl.g.takeOver(&cl.rec, cur, cl.mode, now)
}

// takeOver turns rec, a record of mode, into a claim replacing cur at now (see Claim.takeOver).
func (g *Guard) takeOver(rec, cur *Record, mode Mode, now time.Time) {
	rec.Fence = cur.Fence + 1
	if rec.Fingerprint == "" && !cur.Expired(now) {
		rec.Fingerprint = cur.Fingerprint
	}
	rec.LeaseUntil, rec.ExpiresAt, rec.CreatedAt, rec.UpdatedAt = now.Add(g.opts.Lease), now.Add(g.opts.TTL), now, now
	if mode.marks() {
		rec.LeaseUntil = now
	}
}

// claim writes the claim of an opened call: insert-first, and on a conflict it reads the record and
// applies the state table.
func (cl *Claim) claim(c *Call) (*Claim, Result, error) {
	g, st, ctx, id, mode := cl.g, cl.st, cl.ctx, cl.id, cl.mode
	now := g.opts.Now()
	cl.newRecord(c, now)
	rec := &cl.rec
	for attempt := 0; ; attempt++ {
		err := st.Insert(ctx, rec)
		if err == nil {
			if again, k, res, err := cl.written(c, attempt); !again {
				return k, res, err
			}
			continue
		}
		if errors.Is(err, ErrUnstorable) {
			// The call's own values do not fit the Store (a fingerprint or gid too long): bad input.
			return cl.fail(OutcomeInvalid, fmt.Errorf("idemkit: claiming record: %w", err))
		}
		if !errors.Is(err, ErrExists) {
			if errors.Is(err, ErrInFlight) {
				return cl.fail(OutcomeInFlight, err) // held by another attempt's write (see Store)
			}
			if cl.rerun(err) {
				return nil, Result{}, err
			}
			if done, k, res, err := cl.conflictEnds(err, c, "claiming record"); done {
				return k, res, err
			}
			if !errors.Is(err, ErrNotSent) { // a claim never sent cannot land: nothing to watch for
				cl.abandoned(nil, nil)
			}
			return cl.fail(OutcomeUnavailable, storeErr(ctx, "claiming record", err))
		}
		cl.ev.Conflict = true
		cur, err := st.Get(ctx, id.scope, id.key)
		if errors.Is(err, ErrNotFound) && attempt < 2 {
			continue // deleted between our insert and read (Mark release, sweeper): try again
		}
		if err != nil {
			if errors.Is(err, ErrInFlight) {
				return cl.fail(OutcomeInFlight, err)
			}
			if cl.rerun(err) {
				return nil, Result{}, err
			}
			if done, k, res, err := cl.conflictEnds(err, c, "reading record"); done {
				return k, res, err
			}
			return cl.fail(OutcomeUnavailable, storeErr(ctx, "reading record", err))
		}
		if cur.Version() == rec.Version() {
			// The call's own claim (the owner token is this attempt's): a Store that retried its
			// write after a lost reply met it — ErrExists for the insert, ErrFenced for the takeover
			// that restarted here. It landed: as written, the call goes on with it.
			cl.ev.Conflict = false
			*rec = *cur
			if again, k, res, err := cl.written(c, attempt); !again {
				return k, res, err
			}
			continue
		}
		now = g.opts.Now()
		if v := judge(cur, c.Fingerprint, mode, now); v != verdictTakeover {
			return cl.met(v, cur, c)
		}
		cl.takeOver(cur, now)
		err = st.Update(ctx, rec, cur.Version())
		switch {
		case err == nil:
			cl.ev.Takeover = true
			if again, k, res, err := cl.written(c, attempt); !again {
				return k, res, err
			}
			continue
		case errors.Is(err, ErrFenced) && attempt < 2:
			// Changed or deleted since the read (another attempt's takeover, the sweeper, a Mark
			// release, a purge): start over from the insert, which meets whatever is there now.
			cl.restart(c)
			continue
		case errors.Is(err, ErrFenced):
			return cl.fail(OutcomeInFlight, &InFlightError{RetryAfter: g.opts.Lease})
		case errors.Is(err, ErrInFlight):
			return cl.fail(OutcomeInFlight, err)
		case errors.Is(err, ErrUnstorable):
			// The call's own values do not fit the Store (a Result too large): bad input, as on
			// the insert.
			return cl.fail(OutcomeInvalid, fmt.Errorf("idemkit: claiming record: %w", err))
		case cl.rerun(err):
			return nil, Result{}, err
		default:
			if done, k, res, err := cl.conflictEnds(err, c, "taking over record"); done {
				return k, res, err
			}
			prev := cur.Version()
			cl.abandoned(&prev, nil)
			return cl.fail(OutcomeUnavailable, storeErr(ctx, "taking over record", err))
		}
	}
}

// written goes on with the claim of c the call's attempt-th write put in place (an insert, a takeover,
// or its own claim met after a Store retried that write): it returns claim's answer, or again when the
// claim must be written anew from the insert (see landed).
func (cl *Claim) written(c *Call, attempt int) (again bool, _ *Claim, _ Result, _ error) {
	if again, err := cl.landed(attempt); again {
		cl.restart(c)
		return true, nil, Result{}, nil
	} else if err != nil {
		k, res, err := cl.notLanded(err)
		return false, k, res, err
	}
	cl.claimed()
	return false, cl, Result{}, nil
}

// restart readies the claim of c to be written again from the insert, which meets whatever record
// is there now: the one written (or read) before changed or was deleted meanwhile.
func (cl *Claim) restart(c *Call) {
	fence := cl.rec.Fence
	cl.newRecord(c, cl.g.opts.Now())
	cl.rec.Fence = fence // fences keep counting even when the record was deleted meanwhile
}

// landed checks a claim just written (the attempt-th write of the call) before its function runs.
// Its lease counts from when the claim was made, before the write: a write that took long (the
// database stalled, a group commit waited on a lock, while the caller still waited) leaves it less
// lease than Options.Lease, or none — any other attempt could take it over at once and run the work
// beside the function. Such a claim, older than a third of the lease (a watchdog's renewal period)
// when its write returns, is made again first: taken over by this call, at the next fence, fenced on
// the version written, so that it starts with a whole lease (a mark, with its expiry TTL away) and an
// attempt that decided to take it over meanwhile (its lease ran out) is fenced off rather than landing
// after a mere renewal, which changes no version. landed reports again when the claim is no longer this
// call's (taken over, recovered by a sweeper, deleted since it landed): the claim starts over from the
// insert and meets the record as it is now. A write that fails otherwise is returned, and the function
// does not run: the claim — or the one made again, should that write land after all — is released as
// an abandoned claim is (finished FAILED, fenced on it), caller gone or not, so that a retry runs at
// once rather than meeting a lapsing lease, or a mark that stands for its TTL. Only a write in the
// caller's transaction, seen by nobody before its commit, is not checked.
func (cl *Claim) landed(attempt int) (again bool, err error) {
	g := cl.g
	now := g.opts.Now()
	if cl.callerTx || (cl.mode != ModeExecute && cl.mode != ModeMark) || now.Sub(cl.rec.UpdatedAt) <= g.opts.Lease/3 {
		return false, nil
	}
	was := cl.rec
	cl.takeOver(&was, now)
	err = cl.st.Update(cl.ctx, &cl.rec, was.Version())
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, ErrFenced) && attempt < 2:
		// Started over at the fence of the claim made again: a Store that retried that write after
		// its reply was lost answers ErrFenced although it landed, and the insert's read then
		// recognises it as the call's own (see claim). Another's record is met as it is.
		return true, nil
	case errors.Is(err, ErrFenced):
		cl.rec = was
		return false, &InFlightError{RetryAfter: g.opts.Lease}
	}
	// The function does not run: release the claim. The write may still land (or have landed, its
	// reply lost): the claim released is whichever of the two stands, the one made again too.
	prev := was.Version()
	cl.abandoned(&prev, &was)
	cl.rec = was
	return false, err
}

// notLanded ends a call whose claim landed too late and could not be made again (see landed): in
// flight when another attempt kept changing the record, else the Store's error. The claim that landed
// is released as an abandoned claim is, so that a retry runs at once: landed watched for it, and for
// the claim made again should that write land after all.
func (cl *Claim) notLanded(err error) (*Claim, Result, error) {
	if errors.Is(err, ErrInFlight) {
		return cl.fail(OutcomeInFlight, err)
	}
	return cl.fail(OutcomeUnavailable, storeErr(cl.ctx, "renewing a claim written late", err))
}

// met ends a claim that met cur, a record it does not take over (v, judge's verdict on it): a replay,
// a duplicate, a payload mismatch or in flight.
func (cl *Claim) met(v verdict, cur *Record, c *Call) (*Claim, Result, error) {
	switch v {
	case verdictReplay:
		return cl.replay(cur, c.Fingerprint)
	case verdictDuplicate:
		// Not cached: a mark says SUCCEEDED from its claim on, while its function may still run
		// and fail; only the attempt that finished it may cache it. The event names the mark, as
		// one met in the cache does.
		cl.ev.Fence, cl.ev.Status = cur.Fence, cur.Status
		return cl.fail(OutcomeDuplicate, ErrDuplicate)
	case verdictMismatch:
		return cl.fail(OutcomeMismatch, ErrPayloadMismatch)
	}
	return cl.fail(OutcomeInFlight, &InFlightError{RetryAfter: max(cur.LeaseUntil.Sub(cl.g.opts.Now()), 0)})
}

// conflicted returns the record a claim written in a caller's transaction (MarkTx; TxMark once its
// reruns are spent) conflicted with, and judge's verdict on it, or nil when there is none the claim
// would not take over. A write conflict (ErrConflict) rolled that transaction back or aborted it — a
// deadlock; on PostgreSQL under REPEATABLE READ or SERIALIZABLE, a record another attempt wrote after
// the transaction's snapshot, met by the claim's INSERT, by its locking read of the record it met,
// or by its takeover of that record — so the record is read through the Guard's Store, outside it,
// waiting at most Options.FinishTimeout for a connection (the transaction holds one). Only such a
// failed claim pays for the read.
func (cl *Claim) conflicted(err error, c *Call) (*Record, verdict) {
	if !cl.callerTx || !errors.Is(err, ErrConflict) {
		return nil, verdictTakeover
	}
	cur, err := cl.readOutside()
	if err != nil {
		return nil, verdictTakeover
	}
	if v := judge(cur, c.Fingerprint, cl.mode, cl.g.opts.Now()); v != verdictTakeover {
		return cur, v
	}
	return nil, verdictTakeover
}

// conflictEnds ends a claim written in a caller's transaction that a write conflict rolled back
// (err, the claim's write or read doing; see conflicted), and reports whether it ended it: with the
// answer of the record it conflicted with, or — none, or none readable yet (on Galera the winner's
// write set may not be applied on this node) — with a retryable failure matching ErrConflict.
// Nothing of the transaction happened, so nothing can land (no watch for an abandoned claim) and
// the key is free: the caller runs its transaction again, as after any conflict. It is no store
// outage, and the function did not run: its outcome is OutcomeInFlight, another writer having been
// in the way.
func (cl *Claim) conflictEnds(err error, c *Call, doing string) (done bool, _ *Claim, _ Result, _ error) {
	if !cl.callerTx || !errors.Is(err, ErrConflict) {
		return false, nil, Result{}, nil
	}
	if cur, v := cl.conflicted(err, c); cur != nil {
		k, res, err := cl.met(v, cur, c)
		return true, k, res, err
	}
	k, res, err := cl.fail(OutcomeInFlight, Retryable(fmt.Errorf("idemkit: %s: %w", doing, err)))
	return true, k, res, err
}

// readOutside reads the key's record through the Guard's Store, outside the caller's transaction,
// which holds a connection: it waits at most Options.FinishTimeout for another of the pool.
func (cl *Claim) readOutside() (*Record, error) {
	ctx, cancel := context.WithTimeout(cl.ctx, cl.g.opts.FinishTimeout)
	defer cancel()
	return cl.g.store.Get(ctx, cl.id.scope, cl.id.key)
}

// rerun reports whether a Store error of the claim is a write conflict on which the call runs its
// transaction again (Guard.TxMark, a few times at most) rather than ending: the database rolled the
// transaction back, and nothing of it happened. The claim then returns the error, the call not ended.
func (cl *Claim) rerun(err error) bool {
	if cl.reruns == 0 || !errors.Is(err, ErrConflict) || cl.ctx.Err() != nil {
		return false
	}
	cl.reruns--
	return true
}

// abandoned follows up a claim write (an insert, or a takeover of the record at prev) that failed:
// the caller left (its context ended before the answer), or the reply was lost while it waited (a
// connection reset after the server ran the statement). The statement may still land (one waiting
// on a row lock does, once the lock is free), or have landed, leaving a claim nobody holds: in flight
// until its lease runs out, or, for a mark, the key marked done although its function never ran. A
// goroutine watches for it and releases it — finished FAILED, the key free for a retry, which takes
// it over at the next fence (a mark too: deleted, it would let the next claim start again at fence
// 1, below the fences a failed attempt before it may have conditioned writes on) — for as long as
// that matters: until the claim's lease ends (a claim landing later is stale on arrival, and the
// next attempt takes it over; one with a gid is the Reconciler's), and for a mark, which has no
// lease, for Options.Lease; never shorter than Options.FinishTimeout, never longer than maxWatch.
// It polls with a backoff (10 ms doubling, up to a second), and tries a release that failed again.
// At most maxWatches watch at once per Guard (a store that stalls makes callers leave by the hundred,
// and each watch reads it): a claim abandoned beyond that is left to its lease. Claims whose write
// failed while their callers waited have maxWatches of their own: a database refusing connections
// fails every call so, and they would otherwise take the watches of the claims whose callers left,
// which land when the stall ends. late, when not nil, is the call's own claim at prev, one that
// landed late and that the failed takeover was making again (see Claim.landed): it is released too
// when the watch finds it, and the takeover, conditional on it, can no longer land. As the function
// does not run on any of them, each is released whether or not the caller left — a mark, which has no
// lease, would otherwise refuse every retry as a duplicate until it expired — and, for a caller still
// waiting, a first time before the call answers (that look bounded by Options.FinishTimeout).
//
// The call's lock, when it holds one, goes to the watch until a look of the watch has seen that no
// claim of the call stands (released, never landed, or the record another's) or the watch ends:
// released as the call answers, it let a retry in before the watch's next look, and a retry meeting
// the call's mark — SUCCEEDED from its write on — got ErrDuplicate, final, for a function that never
// ran. It is in flight instead, retryable. The watch renews the lock every third of LockTTL between
// its looks (a look that hangs longer lets it lapse). Only a mark's watch keeps the lock: a claim of
// the other modes is PROCESSING with a lease, which answers a retry in flight by itself while the
// store answers, and while it does not the retry is the store's outage (503, or run unguarded where
// the caller chose that: httpx's RunUnguardedOnOutage), not in flight for as long as the watch lasts.
func (cl *Claim) abandoned(prev *Version, late *Record) {
	g := cl.g
	if cl.callerTx {
		return
	}
	look := cl.releaser(prev, late)
	watches := &g.watches
	if cl.ctx.Err() == nil && late == nil {
		watches = &g.failed
	}
	hold := cl.locked && cl.mode.marks()
	if cl.ctx.Err() == nil {
		// Released before the caller, still waiting, hears of the failure: its retry, however soon,
		// finds the key free (a mark still standing would answer it ErrDuplicate, for good).
		ctx, cancel := context.WithTimeout(cl.ctx, g.opts.FinishTimeout)
		over, free := look(ctx)
		cancel()
		if over {
			return
		}
		hold = hold && !free
	}
	var held *heldLock
	if hold {
		held = &heldLock{g: g, key: cl.id.lockKey, token: cl.token}
	}
	started := watches.Go(cl.ctx, cl.watchFor(), func(ctx context.Context) {
		defer held.release(ctx)
		for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
			over, free := look(ctx)
			if free {
				held.release(ctx)
			}
			if over || !held.sleep(ctx, wait) {
				return
			}
		}
	})
	if started && hold {
		cl.locked = false // the watch's to release now
	}
}

// heldLock is a call's lock that an abandoned-claim watch (see Claim.abandoned) or the rewrite of an
// unwritten finish (see Claim.unwritten) holds. Its methods do nothing on a nil heldLock (the call
// held no lock, or the watch need not keep it). It is used by that goroutine only.
type heldLock struct {
	g          *Guard
	key, token string
	renewed    time.Time // when it was last renewed; zero before the first renewal
	gone       bool      // released, or found no longer held
	// result is cached by the release until until (see Claim.releaseLock), when set.
	result []byte
	until  time.Time
}

// renew extends the lock to LockTTL when a third of that has passed since the watch last did (the
// first time at once: the lock was taken before the claim's write, which may have taken long), and
// returns how long until it is due again (maxWatch when the watch holds no lock).
func (h *heldLock) renew(ctx context.Context) time.Duration {
	if h == nil || h.gone {
		return maxWatch
	}
	period := h.g.opts.LockTTL / 3
	if !h.renewed.IsZero() && time.Since(h.renewed) < period {
		return period - time.Since(h.renewed)
	}
	err := h.g.opts.Locker.Refresh(ctx, h.key, h.token, h.g.opts.LockTTL)
	switch {
	case err == nil:
		h.renewed = time.Now()
	case errors.Is(err, ErrLockNotHeld):
		h.gone = true // expired, or taken since: nothing to keep
		return maxWatch
	}
	return period // renewed, or Redis failed: again a period from now
}

// sleep waits d, renewing the lock when it is due meanwhile (see renew), or until ctx ends; it reports
// whether it waited d.
func (h *heldLock) sleep(ctx context.Context, d time.Duration) bool {
	for until := time.Now().Add(d); ; {
		left := time.Until(until)
		if left <= 0 {
			return true
		}
		if !background.Sleep(ctx, min(left, h.renew(ctx))) {
			return false
		}
	}
}

// release releases the lock, once, on a context that survives ctx's end, bounded by FinishTimeout; a
// release that fails is tried again as a finished call's is (see Claim.retryRelease).
func (h *heldLock) release(ctx context.Context) {
	if h == nil || h.gone {
		return
	}
	h.gone = true
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.g.opts.FinishTimeout)
	defer cancel()
	result, ttl := h.result, h.until.Sub(h.g.opts.Now())
	if ttl <= 0 {
		result, ttl = nil, 0
	}
	if err := h.g.opts.Locker.Release(rctx, h.key, h.token, result, ttl); err != nil && !errors.Is(err, ErrLockNotHeld) {
		h.g.retryRelease(ctx, h.key, h.token, result, h.until)
	}
}

// cache has the release cache r, the record the holder wrote, as a finished call's release does
// (see Claim.finished): a Tx-mode call trusts the cache to hold every key finished (see vouched).
func (h *heldLock) cache(r *Record) {
	if h == nil || r == nil {
		return
	}
	var ttl time.Duration
	if h.result, ttl = h.g.cacheEntry(r, h.g.opts.Now()); h.result != nil {
		h.until = h.g.opts.Now().Add(ttl)
	}
}

// releaser returns one look of abandoned's watch (prev and late as there) at the claim as it is now,
// which releases it when it is still the claim's. It reports whether the watch is over, and whether
// no claim of the call stands as the look found the record (released by it, absent, another's): a
// look that could not read the record, or failed to release the claim it found, is not free.
func (cl *Claim) releaser(prev *Version, late *Record) func(ctx context.Context) (over, free bool) {
	g, st, mine := cl.g, cl.st, cl.rec
	why := "idemkit: the caller left before its claim was written"
	if cl.ctx.Err() == nil {
		why = "idemkit: the claim's write failed (its reply lost); its function did not run"
	}
	if late != nil {
		why = "idemkit: the claim was written late and could not be made again; its function did not run"
	}
	return func(ctx context.Context) (over, free bool) {
		cur, err := st.Get(ctx, mine.Scope, mine.Key)
		switch {
		case err == nil && (cur.Version() == mine.Version() || late != nil && cur.Version() == late.Version()):
			next := *cur
			next.Status, next.Error, next.Response = StatusFailed, why, nil
			next.LeaseUntil, next.UpdatedAt = g.opts.Now(), g.opts.Now()
			// Fenced on the late claim: it was made again in between, release that one; failed (the
			// Store that failed the claim's write): try again.
			err := st.Update(ctx, &next, cur.Version())
			over = err == nil || errors.Is(err, ErrFenced) && cur.Version() == mine.Version()
			return over, over
		case err == nil && prev != nil && cur.Version() != *prev:
			// The takeover is conditional on prev, which is gone for good (fences only grow,
			// owners are never reused). An insert can still land once another record is deleted
			// (the sweeper's DELETE it waited behind): it is watched until the end.
			return true, true
		}
		return false, err == nil || errors.Is(err, ErrNotFound)
	}
}

// watchFor is how long a follow-up of the claim matters: until its lease ends (a claim landing, or
// an outcome written, later is stale on arrival: the next attempt takes the record over, and the
// fenced write fails), and for a mark, which has no lease, for Options.Lease; never shorter than
// Options.FinishTimeout, never longer than maxWatch.
func (cl *Claim) watchFor() time.Duration {
	g, mine := cl.g, cl.rec
	until := mine.LeaseUntil
	if cl.mode.marks() {
		until = mine.UpdatedAt.Add(g.opts.Lease)
	}
	return min(max(until.Sub(g.opts.Now()), g.opts.FinishTimeout), maxWatch)
}

// unwritten writes again, in the background, a finish whose write failed (the store too slow for
// FinishTimeout, a connection dropped): left PROCESSING, the record would be taken over once its
// lease ran out, and a retry of the key would run the work a second time although its outcome is
// known; a failed mark left in place would refuse every retry as a duplicate until it expired. The
// write is fenced on the claim's version, so it lands only on the record as the claim left it — one
// whose first write did land after all, or that was taken over, fences it off — and it is tried with a
// backoff (10 ms doubling, up to a second) for as long as that matters (see watchFor). At most
// maxWatches run at once per Guard, apart from the abandoned-claim watches (a stalled store makes
// both by the dozen, and neither may crowd the other out); beyond that, the record is left to its
// lease.
//
// The call's lock, when it holds one, goes to the rewrite until the write landed (or was fenced off)
// or its tries end, renewed every third of LockTTL between them (see heldLock): released as the call
// answered, it let a retry in while the record still stood as the claim left it — a mark whose
// function failed still SUCCEEDED, refusing the retry with ErrDuplicate, final (a msgx Mark consumer
// acknowledged a message whose function had failed); a claim whose function outlasted its lease taken
// over, its work run again although its outcome was known. The retry is in flight instead, retryable,
// and meets the outcome once written. write returns the record it wrote when the release is to cache
// it (Guard.Tx's rejection: see Claim.rewriteRejection), else nil.
func (cl *Claim) unwritten(write func(context.Context) (*Record, error)) {
	g := cl.g
	var held *heldLock
	if cl.locked {
		held = &heldLock{g: g, key: cl.id.lockKey, token: cl.token}
	}
	started := g.rewrites.Go(cl.ctx, cl.watchFor(), func(ctx context.Context) {
		defer held.release(ctx)
		for wait := 10 * time.Millisecond; held.sleep(ctx, wait); wait = min(2*wait, time.Second) {
			rec, err := write(ctx)
			if err == nil || errors.Is(err, ErrFenced) || errors.Is(err, ErrNotFound) {
				held.cache(rec)
				return
			}
		}
	})
	if started && held != nil {
		cl.locked = false // the rewrite's to release now
	}
}

// forgetLock releases, in the background, the lock an Acquire that failed may have taken all the
// same: its command can take effect while its reply is lost (a read timeout, the caller's deadline
// ending the wait). The call goes on without the lock (FailOpen) or ends, and nothing else would
// release it: the key would answer "in flight" until LockTTL ran out — to the call's retries, and to
// the duplicates of a key finished meanwhile, whose result is not cached. The release compares the
// call's token, so it deletes nothing but that lock. A release that fails (the same blip) is tried
// again as in retryRelease (10 ms backoff doubling, up to a second) until Redis answers. It is bounded
// by FinishTimeout, and at most maxWatches run at once per Guard (a Redis that never answers fails
// every call).
func (cl *Claim) forgetLock() {
	lk, key, token := cl.g.opts.Locker, cl.id.lockKey, cl.token
	cl.g.forgets.Retry(cl.ctx, cl.g.opts.FinishTimeout, func(ctx context.Context) bool {
		err := lk.Release(ctx, key, token, nil, 0)
		return err == nil || errors.Is(err, ErrLockNotHeld)
	})
}

// Bounds of the watches for abandoned claims: how long one lasts at most (InnoDB gives up a lock wait
// after 50 s by default), and how many run at once per Guard.
const (
	maxWatch   = time.Minute
	maxWatches = 64
)

func inFlight(err error) error {
	var e *InFlightError
	if errors.As(err, &e) {
		return e
	}
	return &InFlightError{}
}

// storeErr wraps a Store error of a call whose context is ctx. Once ctx ended, nobody waits for the
// answer and the caller's cancellation or deadline is the cause: the error is the context's, as it is
// when err wraps it, beside err when the driver worded the interruption its own way (pgx's "i/o
// timeout" from the deadline it set on the connection, SQLite's "interrupted"). Anything else — a
// deadline of the Guard's own, such as FinishTimeout on a write that hung, while the caller still
// waits — is ErrStoreUnavailable.
func storeErr(ctx context.Context, doing string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("idemkit: %s: %w", doing, err)
		}
		return fmt.Errorf("idemkit: %s: %w (the store answered: %w)", doing, cerr, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrStoreUnavailable, doing, err)
}

// cacheTTL is how long a finished record may be cached at now: never past its expiry.
func (g *Guard) cacheTTL(r *Record, now time.Time) time.Duration {
	if g.opts.CacheTTL < 0 {
		return 0
	}
	if r.ExpiresAt.IsZero() {
		return g.opts.CacheTTL
	}
	return min(g.opts.CacheTTL, r.ExpiresAt.Sub(now))
}
