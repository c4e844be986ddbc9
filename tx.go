package idemkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/internal/background"
)

// TxBeginner is a Store that begins transactions for [Guard.Tx] (record.Store implements it). The
// Guard reads and writes through the TxBeginner itself what must not wait for, or survive the
// rollback of, the transaction: the read before the function and a permanent failure stored after a
// rollback.
type TxBeginner interface {
	Store
	// BeginTx begins a transaction and returns a Store bound to it. The transaction lasts as long as
	// ctx, as a database/sql one does: once ctx is done, nothing of it commits (Commit fails).
	BeginTx(ctx context.Context) (TxStore, error)
}

// TxStore is a Store bound to a transaction begun by [TxBeginner.BeginTx]. Its Get must read the
// latest committed record and lock it until the transaction ends (SELECT ... FOR UPDATE), as
// record.Store.WithTx does. The Guard ends the transaction with exactly one call of Commit or
// Rollback.
type TxStore interface {
	Store
	Commit() error
	Rollback() error
}

// TxSealer is a TxStore that can refuse to end its transaction. [Guard.Tx] and [Guard.TxMark] seal
// the TxStore they hand their function for as long as the function runs: its Commit and Rollback then
// return an error and leave the transaction open. A function that committed the Guard's transaction
// would commit its writes without their record (the Guard writes it after the function), and every
// duplicate would run them again. record.Store's and the memory Store's transactions implement it; a
// TxStore that does not is handed to the function as it is.
type TxSealer interface {
	TxStore
	// SealTx makes Commit and Rollback refuse (sealed) or work again (not sealed). It may be called
	// while other goroutines use the TxStore.
	SealTx(sealed bool)
}

// InsertCommitter is a TxStore that can write a new record and commit its transaction in one round
// trip (record.Store's transactions on MySQL and MariaDB when the connection allows several statements
// in a packet). [Guard.Tx] uses it, when the TxStore implements it, for the record of a key nobody
// else recorded: the transaction then ends with that call instead of Commit.
//
// InsertCommit returns nil when the record was inserted and the transaction committed: the transaction
// is over. It returns an error matching ErrExists when a record with the key exists (nothing was
// written, the transaction is open and, on a database with row locks, holds that record locked, as
// Insert then Get would), or one wrapping ErrUnstorable or ErrInvalidKey as Insert would (nothing was
// written, the transaction is open). Any other error means the transaction was rolled back or its
// outcome is not known; the Guard then calls Rollback, which must end whatever is left of it.
type InsertCommitter interface {
	InsertCommit(ctx context.Context, rec *Record) error
}

// BeginGetter is a TxBeginner that can begin a transaction and read a record in one round trip
// (record.Store on MySQL and MariaDB when the connection allows several statements in a packet).
// [Guard.Tx] uses it, when its TxBeginner implements it, for the read before the function.
//
// BeginTxGet returns the record for scope and key as Store.Get does (ErrNotFound when there is none),
// and, when it could begin one, a transaction begun before the read: an open TxStore also with
// ErrNotFound, never with another error. A nil TxStore means there is no transaction (the connection
// does not allow one, or BeginTxGet ended it after finding a record): the Guard then calls BeginTx
// when it needs one, as without a BeginGetter.
type BeginGetter interface {
	BeginTxGet(ctx context.Context, scope, key string) (TxStore, *Record, error)
}

// TxFunc is a function guarded by [Guard.Tx]: it makes its writes in the transaction tx (through the
// driver's transaction its TxStore exposes; record.Store.Tx hands it a *gorm.DB) and returns the
// result to store and replay. Its context carries the fence (see [FenceFromContext]). It must not end
// the transaction: the Guard commits it after writing the record in it (a [TxSealer], as record.Store's
// and the memory Store's transactions are, refuses Commit and Rollback while the function runs).
type TxFunc func(ctx context.Context, tx TxStore) ([]byte, error)

// Tx runs fn once for c in a transaction it begins on db, commits and owns (Tx mode): the business
// writes fn makes and the record of their outcome commit together, written once. It is the
// recommended way to guard work whose effects are all in db's database.
//
// The record costs one statement in the transaction: an INSERT of the final record (status and
// result) after fn, beside the business writes. Before fn, a duplicate of a finished key is answered
// from the Locker's cache, or — when there is no Locker, it failed open, or its cache does not keep
// results as long as records count (Options.CacheTTL shorter than Options.TTL) — from the record,
// read with one more statement before the transaction begins. A concurrent duplicate's INSERT waits
// for this transaction and then finds the record; when the INSERT finds a record (another attempt
// committed while fn ran, or Redis lost its data) the Guard reads it with a lock and rolls fn's
// writes back to replay a finished answer (one that still counted when the call began, even if its
// TTL ran out while fn ran), or answers ErrInFlight or ErrPayloadMismatch; a failed, expired or
// abandoned record is taken over in the same transaction.
//
// When fn fails, its writes are rolled back. A record another attempt finished meanwhile is then
// replayed instead of fn's error (a second debit failing for lack of funds still gets the first
// one's answer), and a record of another payload answers ErrPayloadMismatch. Otherwise a retryable
// error is returned and nothing is stored (the key is free); a permanent one (Options.IsPermanent) is
// stored REJECTED in its own write and replayed. When that write fails, the call returns
// ErrStoreUnavailable with fn's error, and the rejection is written again in the background as a
// finish whose write failed is ([Claim.Finish]), the lock kept until it lands: a retry meanwhile is in
// flight, then gets the rejection replayed — never a run of fn answered differently. A permanent
// error that is a write conflict the Store recognises (a deadlock's victim, a serialization failure:
// record.IsConflict) is answered as a retryable one, nothing stored: the database ended the
// transaction to resolve a contention, which a retry may not meet.
//
// After the commit the lock is released and the result cached. Results and errors are those of
// [Guard.Do]; a commit that fails returns ErrStoreUnavailable (the outcome is then unknown: a retry
// replays it or runs), except a commit the database refused on a write conflict (ErrConflict: on
// Galera, a duplicate that won through another node), which nothing of committed: the key's record
// answers then, as after a conflict at the record's INSERT. A conflict at either that no attempt of
// the key won — the business's own, e.g. PostgreSQL's serialization failure of a write skew under
// SERIALIZABLE — is a retryable failure of the call matching ErrConflict, the key free, not
// ErrStoreUnavailable. A panic in fn rolls the transaction
// back and continues. fn runs at most once per call.
func (g *Guard) Tx(ctx context.Context, db TxBeginner, c Call, fn TxFunc) (Result, error) {
	if fn == nil {
		return Result{}, ErrNilFunc
	}
	if db == nil {
		return Result{}, errors.New("idemkit: nil TxBeginner")
	}
	cl, res, err := g.open(ctx, db, ModeTx, &c)
	if cl == nil {
		return res, err
	}
	return cl.runTx(db, &c, fn)
}

// DoTx runs fn once for c inside the caller's transaction (Tx mode, caller-owned). tx is a Store
// bound to that transaction (record.Store.WithTx or WithSQLTx); the record is written once through it,
// after fn, so it commits or rolls back with the business writes fn makes in the same transaction.
// DoTx never commits or rolls back.
//
// The contract is the caller's to keep, and it is loud: whenever DoTx returns an error, the caller must
// roll the transaction back — return the error from db.Transaction's function (with Options.Watchdog, a
// function whose lock Redis lost meanwhile carries on and finishes its writes: they must not commit
// either). In particular, when fn ran but the key turned out finished by another attempt (its record
// committed while fn ran; without a Locker, or when Redis lost its data, this is how a duplicate is
// detected), DoTx returns the stored answer in the Result (Replayed set) together with an error matching
// [ErrRollbackReplayed] (and [ErrRejected] when the stored answer is a rejection): fn's writes must not
// commit.
//
// Before fn, a duplicate of a finished key is answered from the cache or, when tx implements [Peeker],
// from the record as the transaction sees it, read without a lock (one statement in the caller's
// transaction; on MySQL's REPEATABLE READ it may fix the transaction's snapshot); fn then does not
// run and the error is nil (or the stored rejection). The cache cannot vouch for keys here as it does
// for [Guard.Tx]: keys finished by DoTx are not cached. On SQLite that read makes the caller's
// transaction a reader before it writes: open the database with _txlock=immediate so that concurrent
// transactions queue instead of failing with SQLITE_BUSY.
//
// When fn fails, DoTx reads the record (locking it) and replays one finished meanwhile, with
// ErrRollbackReplayed (ErrPayloadMismatch with it for a record of another payload). When that read
// fails — as it always does in a PostgreSQL transaction a failed statement aborted, e.g. a debit a
// CHECK refused because the attempt that finished the key debited first — it reads the record again
// through the Guard's Store, outside the transaction (on a connection of its own, waiting at most
// Options.FinishTimeout for one), so the answer still never depends on running fn again.
// Otherwise — nothing finished there, or neither read could tell — it returns fn's error. For a
// permanent error it has also written the record REJECTED in tx: the caller's rollback (the rule
// above) removes it with fn's writes and leaves the key free, so a retry runs again — the rejection
// is stored only if the caller deliberately commits fn's writes with it. A permanent error that is a
// write conflict the Store recognises (a deadlock, a serialization failure: record.IsConflict) ended
// the transaction: nothing is written after it — on MySQL it would commit on its own —, and fn's
// error is the answer, as for a retryable one. So too when fn succeeded but
// its record's INSERT failed without meeting the record — on PostgreSQL in a REPEATABLE READ or
// SERIALIZABLE transaction, a record committed after the snapshot fails it with a serialization
// failure that aborts the transaction —: a finished record read outside the transaction is replayed,
// with ErrRollbackReplayed; when there is none and the INSERT failed on a write conflict (a deadlock;
// on Galera a certification failure or brute-force abort), the error is a retryable one matching
// [ErrConflict], not [ErrStoreUnavailable]: run the transaction again. [Guard.Tx] rolls fn's writes
// back and stores the rejection on its own, so duplicates get it replayed. The cache is never filled
// by DoTx: the transaction may still roll back. Prefer [Guard.Tx], which owns the transaction and
// cannot get this wrong.
func (g *Guard) DoTx(ctx context.Context, tx Store, c Call, fn Func) (Result, error) {
	if fn == nil {
		return Result{}, ErrNilFunc
	}
	if tx == nil {
		return Result{}, errors.New("idemkit: nil transaction Store")
	}
	cl, res, err := g.open(ctx, tx, ModeTx, &c)
	if cl == nil {
		return res, err
	}
	cl.callerTx = true
	return cl.runDoTx(&c, fn)
}

// MarkTx runs fn once for c inside the caller's transaction, marking the key done through tx (a Store
// bound to that transaction, as for DoTx) before fn runs: one INSERT beside the business writes, the
// cheapest guard there is, and duplicates never run fn. Duplicates get ErrDuplicate and nothing is
// replayed. Unlike Mark it is crash-safe: the mark commits or rolls back with the business. Return
// fn's error from the transaction so it rolls back and the key is free again (for a retryable error
// MarkTx also removes the mark in tx, at best: when it cannot — on PostgreSQL the failed statement
// behind fn's error aborted tx — fn's error is still the answer alone); a permanent error (when the
// caller commits anyway) leaves the key REJECTED. The cache is not filled (the transaction may
// still roll back). When the mark's INSERT — or the read and takeover of a failed or expired record
// it met — fails on a write conflict that ended the transaction (a deadlock; on PostgreSQL under
// REPEATABLE READ or SERIALIZABLE, a record written after the transaction's snapshot), the record is
// read through the Guard's Store, outside the transaction, and answers the call (ErrDuplicate for a
// mark): return the error, the transaction is lost anyway. With no record to answer (none; on Galera,
// a winner's not applied on this node yet), fn has not run and the call fails with a retryable error
// matching ErrConflict, not ErrStoreUnavailable: run the transaction again.
func (g *Guard) MarkTx(ctx context.Context, tx Store, c Call, fn func(ctx context.Context) error) error {
	if fn == nil {
		return ErrNilFunc
	}
	if tx == nil {
		return errors.New("idemkit: nil transaction Store")
	}
	cl, _, err := g.open(ctx, tx, ModeMarkTx, &c)
	if cl == nil {
		return err
	}
	cl.callerTx = true
	if cl, _, err = cl.claim(&c); cl == nil {
		return err
	}
	_, err = cl.run(func(ctx context.Context) ([]byte, error) { return nil, fn(ctx) })
	return err
}

// TxMarkFunc is a function guarded by [Guard.TxMark]: it makes its writes in the transaction tx
// (record.Store.TxMark hands it a *gorm.DB). Its context carries the fence.
type TxMarkFunc func(ctx context.Context, tx TxStore) error

// TxMark is MarkTx in a transaction the Guard begins on db, commits and owns: to MarkTx what Tx is to
// DoTx, and the counterpart of DTM's barrier (BranchBarrier.CallWithDB, which owns its transaction too).
// The mark is one INSERT at the start of the transaction — with record.Store on MySQL or MariaDB
// allowing several statements in a packet, in the packet of START TRANSACTION — fn's writes follow,
// and the Guard commits: three round trips where DTM's barrier takes four. The mark commits with fn's
// writes or not at all, so it is crash-safe.
//
// A duplicate's INSERT waits for the transaction and then finds the mark: it gets ErrDuplicate and fn
// does not run; nothing is replayed (a mark stores no result: use Tx for that). A failed, expired or
// abandoned record is taken over in the same transaction. A transaction the database rolls back on a
// write conflict before fn ran (the Store's error matches ErrConflict: InnoDB deadlocks duplicates that
// waited on a mark whose transaction rolled back) runs again, a few times at most; past them the
// call fails with a retryable error matching ErrConflict (the record it conflicted with answers
// instead when one can be read), fn not run.
//
// When fn fails or panics, its writes and the mark roll back: the key is free again and fn's error
// is returned, retryable or permanent alike (a mark keeps no answer, so a permanent failure is not
// stored; a retry runs fn again and fails the same way, its writes rolled back again). A commit
// that fails returns ErrStoreUnavailable: the outcome is then unknown, and a retry gets
// ErrDuplicate or runs — except a commit refused on a write conflict (ErrConflict: on Galera, a
// duplicate that won through another node), which nothing of committed: the winner's mark answers
// it, ErrDuplicate; with no winner (the business's own conflict, e.g. a write skew under
// PostgreSQL's SERIALIZABLE) the call fails retryably with an error matching ErrConflict, the key
// free. After the commit the lock is released and the mark cached, so a duplicate is answered by
// the Locker alone.
func (g *Guard) TxMark(ctx context.Context, db TxBeginner, c Call, fn TxMarkFunc) error {
	if fn == nil {
		return ErrNilFunc
	}
	if db == nil {
		return errors.New("idemkit: nil TxBeginner")
	}
	cl, _, err := g.open(ctx, db, ModeMarkTx, &c)
	if cl == nil {
		return err
	}
	return cl.runTxMark(db, &c, fn)
}

// conflictRetries bounds the runs of TxMark's transaction again after a write conflict.
const conflictRetries = 3

// runTxMark is Guard.TxMark after the lock. The mark is the transaction's first write: when the
// database rolled the transaction back on a write conflict before the mark was made (InnoDB deadlocks
// the duplicates waiting on a mark whose transaction rolled back), nothing happened, and the
// transaction runs again, within the same call: under the same lock, reported once.
func (cl *Claim) runTxMark(db TxBeginner, c *Call, fn TxMarkFunc) error {
	cl.reruns = conflictRetries
	for {
		tx, err := db.BeginTx(cl.ctx)
		if err != nil {
			_, _, err = cl.fail(OutcomeUnavailable, storeErr(cl.ctx, "beginning transaction", err))
			return err
		}
		// The claim writes in tx, and until the commit nothing of it may be cached: as in a caller's
		// transaction.
		cl.st, cl.callerTx = tx, true
		_, _, err = cl.claim(c)
		switch {
		case err == nil:
			return cl.txMarked(db, tx, c, fn)
		case cl.done: // answered without a mark: a duplicate, in flight, a failure
			cl.rollback(tx)
			return err
		}
		cl.rollback(tx) // a write conflict before the mark (see rerun): run the transaction again
	}
}

// txMarked runs fn in tx, where the claim just marked the key, and commits.
func (cl *Claim) txMarked(db TxBeginner, tx TxStore, c *Call, fn TxMarkFunc) error {
	_, ferr := cl.call(tx, func(ctx context.Context) ([]byte, error) { return nil, fn(ctx, tx) })
	if ferr != nil {
		cl.rollback(tx)
		next := cl.rec
		next.Status, next.Error = StatusFailed, errorText(ferr)
		_, err := cl.finished(&next, nil, ferr, false)
		return err
	}
	if err := cl.keepMark(cl.ctx, tx); err != nil {
		cl.rollback(tx)
		if errors.Is(err, ErrConflict) { // rolled back: nothing committed (see rolledBack)
			_, err = cl.rolledBack(nil, fmt.Errorf("idemkit: writing record: %w", err))
			return err
		}
		_, _, err = cl.fail(OutcomeUnavailable, storeErr(cl.ctx, "writing record", err))
		return err
	}
	if err := tx.Commit(); err != nil {
		if errors.Is(err, ErrConflict) {
			// Refused on a write conflict (see txCommit): nothing committed, the winner's mark answers.
			if cur, v := cl.winner(db, c); cur != nil {
				_, err := cl.answer(v, cur, c)
				return err
			}
			_, err = cl.rolledBack(nil, fmt.Errorf("idemkit: committing transaction: %w", err))
			return err
		}
		// The commit may have happened or not: nothing is cached, a retry finds out.
		_, _, err = cl.fail(OutcomeUnavailable, storeErr(cl.ctx, "committing transaction", err))
		return err
	}
	cl.callerTx = false // committed: the mark may be cached
	next := cl.rec
	next.Response = nil
	_, err := cl.finished(&next, nil, nil, true)
	return err
}

// vouched reports whether the cache answers for the key: the lock was taken because the key held
// neither a lock nor a cached result, and finished results stay cached as long as their records
// count. A Tx-mode call then needs no read before its function.
func (cl *Claim) vouched() bool { return cl.locked && cl.g.opts.CacheTTL >= cl.g.opts.TTL }

// ended turns the results of fail and replay into a call's.
func ended(_ *Claim, res Result, err error) (Result, error) { return res, err }

// runTx is Guard.Tx after the lock.
func (cl *Claim) runTx(db TxBeginner, c *Call, fn TxFunc) (Result, error) {
	g := cl.g
	now := g.opts.Now()
	cl.began = now
	cl.newRecord(c, now)
	var prev *Version // the record read before fn, to be taken over
	var tx TxStore    // begun with the read, when db can (BeginGetter)
	if !cl.vouched() {
		var cur *Record
		var err error
		if bg, ok := db.(BeginGetter); ok {
			tx, cur, err = bg.BeginTxGet(cl.ctx, cl.id.scope, cl.id.key)
		} else {
			cur, err = db.Get(cl.ctx, cl.id.scope, cl.id.key)
		}
		// ends the transaction begun with the read, if any, before an answer without fn
		end := func() {
			if tx != nil {
				cl.rollback(tx)
			}
		}
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			end()
			return ended(cl.fail(OutcomeUnavailable, storeErr(cl.ctx, "reading record", err)))
		default:
			if v := judge(cur, c.Fingerprint, ModeTx, now); v != verdictTakeover {
				end()
				return cl.answer(v, cur, c)
			}
			v := cur.Version()
			prev = &v
			cl.takeOver(cur, now)
			cl.ev.Takeover = true
		}
	}

	if tx == nil {
		var err error
		if tx, err = db.BeginTx(cl.ctx); err != nil {
			return ended(cl.fail(OutcomeUnavailable, storeErr(cl.ctx, "beginning transaction", err)))
		}
	}
	if prev == nil && cl.vouched() {
		// Nothing was read: the cache holds no result for the key, but a failed or abandoned record
		// may be there. A function that asks for its fence reads it (see FenceFromContext).
		l := &cl.lazyFence
		l.ctx, l.tx, l.scope, l.key, l.fence, l.ok = cl.ctx, tx, cl.id.scope, cl.id.key, cl.rec.Fence, true
		cl.lazy = l
	}
	cl.claimed() // the lock, the read and the transaction: the record itself is written after fn
	val, ferr := cl.call(tx, func(ctx context.Context) ([]byte, error) { return fn(ctx, tx) })
	if cl.lazy != nil {
		found, rerr := cl.lazy.close()
		cl.lazy = nil
		switch {
		case rerr != nil:
			// The function's fence is not known: its writes must not commit. The Store failed, not
			// the business: retryable whatever Options.IsPermanent says of the joined errors.
			ferr = errors.Join(Retryable(storeErr(cl.ctx, "reading record for the fence", rerr)), ferr)
		case found != nil:
			// Read and locked in tx: take it over at the fence the function saw. A record this call
			// does not take over (finished meanwhile, in flight) is met by the write as always.
			if now := g.opts.Now(); cl.judgeMet(found, c.Fingerprint, now) == verdictTakeover {
				v := found.Version()
				prev = &v
				cl.takeOver(found, now)
				cl.ev.Takeover = true
			}
		}
	}
	if ferr != nil {
		cl.rollback(tx)
		return cl.txFailed(db, c, prev, val, ferr)
	}
	return cl.txCommit(db, tx, c, prev, val)
}

// rollback rolls tx back, logging a failure (the database rolls back an abandoned transaction anyway).
func (cl *Claim) rollback(tx TxStore) {
	if err := tx.Rollback(); err != nil {
		cl.g.opts.Logger.WarnContext(cl.ctx, "idemkit: rolling back", "scope", cl.ev.Scope, "error", err)
	}
}

// txCommit writes the success of fn in tx, commits, then caches and unlocks.
func (cl *Claim) txCommit(db TxBeginner, tx TxStore, c *Call, prev *Version, val []byte) (Result, error) {
	g := cl.g
	next := cl.rec
	cl.writtenAt(&next, g.opts.Now())
	outcome(&next, val, nil, false)
	var first error // what an INSERT sent with the COMMIT found
	if ic, ok := tx.(InsertCommitter); ok && prev == nil {
		first = ic.InsertCommit(cl.ctx, &next)
		switch {
		case first == nil:
			return cl.finished(&next, val, nil, true)
		case errors.Is(first, ErrExists), errors.Is(first, ErrUnstorable), errors.Is(first, ErrInvalidKey):
			// Nothing written and the transaction open: as after an Insert.
		default:
			return cl.writeFailed(db, tx, c, first)
		}
	}
	stored, err := cl.put(tx, c, &next, prev, first)
	switch {
	case stored != nil:
		cl.rollback(tx)
		return ended(cl.replay(stored, c.Fingerprint))
	case errors.Is(err, ErrUnstorable):
		// The outcome does not fit the Store (a result too large for its column): nothing commits,
		// and the key is rejected saying why, so it is not run again to the same end.
		cl.rollback(tx)
		return cl.txFailed(db, c, prev, nil, &unstorableError{err})
	case err != nil:
		return cl.writeFailed(db, tx, c, err)
	}
	if err := tx.Commit(); err != nil {
		if errors.Is(err, ErrConflict) {
			// The database rolled the transaction back on a write conflict at COMMIT (on Galera, the
			// certification failure that ends a duplicate sent through another node): nothing of it
			// committed, and the attempt that won answers, as after a conflict at the INSERT.
			if cur, v := cl.winner(db, c); cur != nil {
				return cl.answer(v, cur, c)
			}
			return cl.rolledBack(val, fmt.Errorf("idemkit: committing transaction: %w", err))
		}
		// The commit may have happened or not: nothing is cached, a retry finds out.
		return ended(cl.fail(OutcomeUnavailable, storeErr(cl.ctx, "committing transaction", err)))
	}
	return cl.finished(&next, val, nil, true)
}

// writeFailed ends a Tx-mode call whose record could not be written in tx, after rolling tx back.
// When the database rolled the transaction back to settle a race with another writer of the key
// (ErrConflict: a deadlock; on PostgreSQL, a unique index being built, which is no ON CONFLICT
// arbiter), that attempt's record, read now, answers the call as a read before fn would have.
//
// The other writer may not have committed yet: when InnoDB resolves a deadlock among duplicates that
// waited on a record whose transaction rolled back, the survivor's INSERT and COMMIT follow the
// victim's error. So a record not found is read again a few times, for up to about 150 ms.
func (cl *Claim) writeFailed(db TxBeginner, tx TxStore, c *Call, err error) (Result, error) {
	cl.rollback(tx)
	if errors.Is(err, ErrConflict) {
		if cur, v := cl.winner(db, c); cur != nil {
			return cl.answer(v, cur, c)
		}
		return cl.rolledBack(nil, fmt.Errorf("idemkit: writing record: %w", err))
	}
	return ended(cl.failWrite(err))
}

// rolledBack ends a Tx-mode call whose transaction the database rolled back on a write conflict
// (err matches ErrConflict) that no attempt of the key won: the business's own — PostgreSQL's
// serialization failure of a write skew, a deadlock over business rows, a Galera certification
// conflict with another key's writes. Nothing of it committed and the key is free: a retryable
// failure of the call, not an outage of the Store.
func (cl *Claim) rolledBack(val []byte, err error) (Result, error) {
	next := cl.rec
	next.Status, next.Error = StatusFailed, errorText(err)
	return cl.finished(&next, val, Retryable(err), false)
}

// winner reads the record of the attempt that won a write conflict with this call's transaction, and
// judges it: nil when none was found, or it is one this call would take over.
func (cl *Claim) winner(db TxBeginner, c *Call) (*Record, verdict) {
	for wait := 5 * time.Millisecond; ; wait *= 2 {
		cur, err := db.Get(cl.ctx, cl.id.scope, cl.id.key)
		if err == nil {
			if v := cl.judgeMet(cur, c.Fingerprint, cl.g.opts.Now()); v != verdictTakeover {
				return cur, v
			}
		}
		if !errors.Is(err, ErrNotFound) || wait > conflictReread || !background.Sleep(cl.ctx, wait) {
			return nil, verdictTakeover
		}
	}
}

// conflictReread bounds the waits of writeFailed's reads (5, 10, ... ms: about 150 ms in all).
const conflictReread = 80 * time.Millisecond

// answer ends a Tx-mode call with what a record it does not take over says (v, judge's verdict on
// cur): see met.
func (cl *Claim) answer(v verdict, cur *Record, c *Call) (Result, error) {
	return ended(cl.met(v, cur, c))
}

// txFailed ends a Tx-mode call whose function failed, after the rollback of its writes.
func (cl *Claim) txFailed(db TxBeginner, c *Call, prev *Version, val []byte, ferr error) (Result, error) {
	g := cl.g
	dctx, cancel := cl.detached(cl.ctx)
	defer cancel()
	var unstorable *unstorableError
	isUnstorable := errors.As(ferr, &unstorable)
	// A write conflict the database ended the transaction on (a deadlock's victim, a serialization
	// failure) is no business failure, whatever Options.IsPermanent says of it: not stored REJECTED,
	// where every retry would get it replayed (as DoTx, see txEnded).
	if !isUnstorable && (!g.IsPermanent(ferr) || cl.txEnded(ferr)) {
		// A record finished by another attempt meanwhile is the answer, not fn's error; so is one
		// of another payload (ErrPayloadMismatch), as it is to a success or a permanent failure.
		cur, err := db.Get(dctx, cl.id.scope, cl.id.key)
		if err == nil {
			now := g.opts.Now()
			if v := cl.judgeMet(cur, c.Fingerprint, now); v == verdictReplay || v == verdictMismatch {
				return cl.answer(v, cur, c)
			}
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			// Whether another attempt finished the key cannot be known: say so with fn's error.
			ferr = errors.Join(storeErr(cl.ctx, "reading record", err), ferr)
		}
		next := cl.rec
		next.Status, next.Error = StatusFailed, errorText(ferr)
		return cl.finished(&next, val, ferr, false)
	}
	next := cl.rec
	cl.writtenAt(&next, g.opts.Now())
	unrecorded := ferr // the answer when the record below cannot be written either
	if isUnstorable {
		unrecorded = unstorable.err
		next.Status, next.Response, next.Error = StatusRejected, nil, errorText(fmt.Errorf("idemkit: the outcome could not be stored: %w", unstorable.err))
		ferr = fmt.Errorf("%w: recorded as %s without its result: %w", ErrUnstorable, StatusRejected, unstorable.err)
	} else {
		outcome(&next, val, ferr, true)
	}
	stored, over, err := cl.putOver(storeCtx{db, dctx}, c, &next, prev, nil)
	switch {
	case stored != nil:
		return ended(cl.replay(stored, c.Fingerprint))
	case errors.Is(err, ErrUnstorable):
		// Even the rejection does not fit (an error text the database refuses): store the reason.
		unfit(&next, err)
		if stored, over, err = cl.putOver(storeCtx{db, dctx}, c, &next, over, nil); stored != nil {
			return ended(cl.replay(stored, c.Fingerprint))
		}
	}
	if err != nil {
		cl.ev.Outcome, cl.ev.Status = OutcomeExecuted, "" // the outcome was not written
		werr := cl.classify(err)
		if !errors.Is(err, ErrInFlight) && !errors.Is(err, ErrPayloadMismatch) {
			// The store failed: write the rejection again in the background, keeping the lock
			// until it lands (see Claim.unwritten). Released now, a retry would run fn again, and
			// could succeed where this call was told its request was rejected.
			cl.unwritten(cl.rewriteRejection(db, c, next, over))
		}
		cl.releaseLock(dctx, nil, 0)
		cl.done = true
		cl.ev.Err = errors.Join(werr, unrecorded)
		g.report(cl.ctx, &cl.ev, cl.rawKey, cl.end, cl.start)
		return Result{}, cl.ev.Err
	}
	return cl.finished(&next, val, ferr, true)
}

// unfit turns rec, a rejection the Store refused (refused: its error), into one that says why,
// without a result.
func unfit(rec *Record, refused error) {
	rec.Response, rec.Error = nil, errorText(fmt.Errorf("idemkit: the outcome could not be stored: %w", refused))
}

// rewriteRejection returns the write of rec, a rejection Guard.Tx could not store after its
// rollback, to be made again through db (see Claim.unwritten): an INSERT, or an UPDATE of the record
// at over it was taking over. A record met instead is judged as put judges it: one it would take
// over (failed, expired) is taken over; the call's own write, which landed after all, or another
// attempt's finished or in-flight one ends it (ErrFenced): that record answers the key now. A
// rejection the Store refuses is written saying why, as the call would have. It returns the record it
// wrote, for the lock's release to cache.
func (cl *Claim) rewriteRejection(db Store, c *Call, rec Record, over *Version) func(context.Context) (*Record, error) {
	g, fingerprint, began := cl.g, c.Fingerprint, cl.began
	return func(ctx context.Context) (*Record, error) {
		for {
			var ev Event // the call's answered: nothing to report
			stored, at, err := g.putAt(ctx, db, ModeTx, fingerprint, began, &rec, over, nil, &ev, nil)
			over = at // the next write starts where this one stopped: over what it took over
			switch {
			case errors.Is(err, ErrUnstorable) && rec.Response != nil:
				unfit(&rec, err)
				continue
			case errors.Is(err, ErrNotFound):
				continue // deleted again and again meanwhile: insert again
			case err == nil && stored == nil:
				written := rec
				return &written, nil // written, or the call's own write met: it landed after all
			case err == nil || errors.Is(err, ErrInFlight) || errors.Is(err, ErrPayloadMismatch):
				return nil, ErrFenced // another attempt's record answers the key now
			}
			return nil, err // the Store failed: written again later
		}
	}
}

// runDoTx is Guard.DoTx after the lock.
func (cl *Claim) runDoTx(c *Call, fn Func) (Result, error) {
	g := cl.g
	now := g.opts.Now()
	cl.began = now
	cl.newRecord(c, now)
	var prev *Version // the record read before fn, to be taken over
	// The cache cannot vouch here: DoTx itself never fills it. Read (without a lock) before fn.
	if p, ok := cl.st.(Peeker); ok {
		cur, err := p.Peek(cl.ctx, cl.id.scope, cl.id.key)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return ended(cl.fail(OutcomeUnavailable, storeErr(cl.ctx, "reading record", err)))
		default:
			if v := judge(cur, c.Fingerprint, ModeTx, now); v != verdictTakeover {
				return cl.answer(v, cur, c) // fn did not run: nothing to roll back
			}
			v := cur.Version()
			prev = &v
			cl.takeOver(cur, now)
			cl.ev.Takeover = true
		}
	}
	cl.claimed() // the lock and the read: the record itself is written after fn
	val, ferr := cl.call(nil, fn)

	next := cl.rec
	cl.writtenAt(&next, g.opts.Now())
	permanent := g.IsPermanent(ferr)
	if ferr != nil && (!permanent || cl.txEnded(ferr)) {
		// A record finished by another attempt meanwhile is the answer, not fn's error; so is one
		// of another payload (ErrPayloadMismatch, with ErrRollbackReplayed), as it is to a success
		// or a permanent failure. The read is the best the call can do, not part of its outcome:
		// when it finds nothing it can tell (see metElsewhere) fn's error stays the answer, and the
		// caller's retry, in a new transaction, meets the record. It is no store outage.
		if cur := cl.metElsewhere(c); cur != nil {
			return cl.replayRollback(cur, c)
		}
		next.Status, next.Error = StatusFailed, errorText(ferr)
		return cl.finished(&next, val, ferr, false)
	}
	outcome(&next, val, ferr, permanent)
	stored, err := cl.put(cl.st, c, &next, prev, nil)
	var note error
	if errors.Is(err, ErrUnstorable) {
		refused := err
		next.Status, next.Response = StatusRejected, nil
		next.Error = errorText(fmt.Errorf("idemkit: the outcome could not be stored: %w", refused))
		stored, err = cl.put(cl.st, c, &next, prev, nil)
		note = fmt.Errorf("%w: recorded as %s without its result: %w", ErrUnstorable, next.Status, refused)
	}
	switch {
	case stored != nil:
		return cl.replayRollback(stored, c)
	case err != nil && ferr != nil:
		// fn's failure stays the answer, with why its rejection was not recorded, as in Guard.Tx (on
		// PostgreSQL a failed business statement aborts the transaction, so no record can follow it)
		// — unless another attempt finished the key meanwhile: its answer is the call's.
		if cur := cl.metElsewhere(c); cur != nil {
			return cl.replayRollback(cur, c)
		}
		cl.ev.Status = "" // the outcome was not written
		return ended(cl.fail(OutcomeExecuted, errors.Join(cl.classify(err), ferr)))
	case err != nil && !errors.Is(err, ErrInFlight) && !errors.Is(err, ErrPayloadMismatch):
		// The INSERT failed without reading a record: on PostgreSQL in a REPEATABLE READ or
		// SERIALIZABLE transaction, a record committed after its snapshot fails it with a
		// serialization failure (ErrConflict) that aborts the transaction. That record is the answer.
		if cur := cl.metElsewhere(c); cur != nil {
			return cl.replayRollback(cur, c)
		}
		if errors.Is(err, ErrConflict) {
			// The database rolled the caller's transaction back (a deadlock; on Galera a
			// certification failure or brute-force abort) and no winner's record is readable (none,
			// or not applied on this node yet): nothing committed, the caller runs it again.
			return cl.rolledBack(nil, fmt.Errorf("idemkit: writing record: %w", err))
		}
		return ended(cl.failWrite(err))
	case err != nil:
		return ended(cl.failWrite(err))
	}
	res, err := cl.finished(&next, val, errors.Join(note, ferr), false)
	if note != nil {
		res = Result{}
	}
	return res, err
}

// conflictTeller is a Store that recognises its database's errors of a write conflict (record.Store).
type conflictTeller interface {
	IsConflict(err error) bool
}

// txEnded reports whether ferr, the error of a function guarded in the caller's transaction, says the
// database rolled that transaction back on a write conflict (a deadlock, a serialization failure), as
// the call's Store, or the Guard's, tells. Nothing may be written after it: on MySQL and MariaDB the
// connection is then outside any transaction, and a record written on it would commit on its own,
// whatever the caller does.
func (cl *Claim) txEnded(ferr error) bool {
	if errors.Is(ferr, ErrConflict) {
		return true
	}
	t, ok := cl.st.(conflictTeller)
	if !ok {
		t, ok = cl.g.store.(conflictTeller)
	}
	return ok && t.IsConflict(ferr)
}

// metElsewhere returns the record another attempt finished (or wrote for another payload) while a
// DoTx call's function ran and failed, or nil when there is none or it cannot be read. It reads
// through the caller's transaction and, when that read fails — PostgreSQL refuses every statement of a
// transaction that a failed statement aborted, a business failure such as a debit refused by a CHECK
// because the other attempt's debit committed first — through the Guard's Store, outside the
// transaction, waiting at most Options.FinishTimeout for a connection of its pool (the caller's
// transaction holds one). Answered with fn's error instead, the call would depend on running the
// business again. Only a failed call pays for the second read.
func (cl *Claim) metElsewhere(c *Call) *Record {
	g := cl.g
	cur, err := cl.st.Get(cl.ctx, cl.id.scope, cl.id.key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		cur, err = cl.readOutside()
	}
	if err != nil {
		return nil
	}
	if v := cl.judgeMet(cur, c.Fingerprint, g.opts.Now()); v == verdictReplay || v == verdictMismatch {
		return cur
	}
	return nil
}

// replayRollback answers a DoTx call whose function ran in the caller's transaction with the record
// another attempt finished: the stored answer, and ErrRollbackReplayed so the caller rolls back.
func (cl *Claim) replayRollback(r *Record, c *Call) (Result, error) {
	if otherPayloadThan(c.Fingerprint, r.Fingerprint) {
		return ended(cl.fail(OutcomeMismatch, errors.Join(ErrPayloadMismatch, ErrRollbackReplayed)))
	}
	var err error = ErrRollbackReplayed
	if r.Status == StatusRejected {
		err = errors.Join(ErrRollbackReplayed, &RejectedError{Message: r.Error})
	}
	cl.ev.Fence, cl.ev.Status, cl.ev.Conflict = r.Fence, r.Status, true
	cl.finishEarly(OutcomeReplayed, err)
	return Result{Value: r.Response, Replayed: true, Fence: r.Fence}, err
}

// put writes rec, this call's record, through st: an INSERT when prev is nil, else an UPDATE over
// prev. When the record exists (or moved on from prev) it reads it through st and applies the state
// table: a finished record is returned for a replay (nothing is written); an in-flight or
// mismatching one ends the call with [*InFlightError] or ErrPayloadMismatch; any other (failed,
// expired, abandoned) is taken over: rec gets its fence + 1 and replaces it. Other errors are the
// Store's.
//
// first, when not nil, is the outcome of an INSERT of rec already made (InsertCommit's): it is not
// made again.
func (cl *Claim) put(st Store, c *Call, rec *Record, prev *Version, first error) (*Record, error) {
	stored, _, err := cl.putOver(st, c, rec, prev, first)
	return stored, err
}

// putOver is put, which also returns the version the last write was conditioned on (nil for an
// INSERT): the record it took over, when it met one, for a write to be made again.
func (cl *Claim) putOver(st Store, c *Call, rec *Record, prev *Version, first error) (*Record, *Version, error) {
	return cl.g.putAt(cl.ctx, st, cl.mode, c.Fingerprint, cl.began, rec, prev, first, &cl.ev, func(r *Record) { cl.rec = *r })
}

// putAt is putOver for a call of mode with fingerprint that began at began (zero: not known), its
// Store calls on ctx: it marks ev's Conflict and Takeover, and gives took each record it takes over.
// Guard.Tx's rejection written again in the background (see Claim.rewriteRejection) runs it apart
// from its Claim.
func (g *Guard) putAt(ctx context.Context, st Store, mode Mode, fingerprint string, began time.Time, rec *Record,
	prev *Version, first error, ev *Event, took func(*Record)) (*Record, *Version, error) {
	for attempt := 0; ; attempt++ {
		var err error
		if attempt == 0 && first != nil {
			err = first
		} else if prev == nil {
			err = st.Insert(ctx, rec)
		} else {
			err = st.Update(ctx, rec, *prev)
		}
		if err == nil || (!errors.Is(err, ErrExists) && !errors.Is(err, ErrFenced)) {
			return nil, prev, err
		}
		ev.Conflict = true
		cur, err := st.Get(ctx, rec.Scope, rec.Key)
		if errors.Is(err, ErrNotFound) && attempt < 2 {
			prev = nil // deleted meanwhile (sweeper, a released mark): insert again
			continue
		}
		if err != nil {
			return nil, prev, err
		}
		if cur.Version() == rec.Version() {
			// The call's own record (the owner token is this attempt's): a Store that retried its
			// write after a lost reply met it. Written.
			ev.Conflict = false
			return nil, prev, nil
		}
		if attempt >= 2 {
			return nil, prev, &InFlightError{RetryAfter: g.opts.Lease}
		}
		now := g.opts.Now()
		switch judgeMetAt(began, cur, fingerprint, now) {
		case verdictReplay:
			return cur, prev, nil
		case verdictMismatch:
			return nil, prev, ErrPayloadMismatch
		case verdictInFlight:
			return nil, prev, &InFlightError{RetryAfter: max(cur.LeaseUntil.Sub(now), 0)}
		}
		v := cur.Version()
		prev = &v
		g.takeOver(rec, cur, mode, now) // its status, result and error stay the outcome's
		if took != nil {
			took(rec)
		}
		ev.Takeover = true
	}
}

// judgeMet applies the state table at now to cur, a record a Tx-mode call meets after its function
// ran. A finished record that still counted when the call began answers it, even when it expired
// while the function ran: the call is its duplicate, as a read before the function (or the cache)
// would have told, and taking the record over would commit the business a second time.
func (cl *Claim) judgeMet(cur *Record, fingerprint string, now time.Time) verdict {
	return judgeMetAt(cl.began, cur, fingerprint, now)
}

// judgeMetAt is judgeMet for a call that began at began (zero: not known).
func judgeMetAt(began time.Time, cur *Record, fingerprint string, now time.Time) verdict {
	if cur.Status.Terminal() && cur.Expired(now) && !began.IsZero() && !cur.Expired(began) {
		now = began
	}
	return judge(cur, fingerprint, ModeTx, now)
}

// failWrite ends a call whose record could not be written: in flight, mismatch or the Store's error.
func (cl *Claim) failWrite(err error) (*Claim, Result, error) {
	switch {
	case errors.Is(err, ErrInFlight):
		return cl.fail(OutcomeInFlight, err)
	case errors.Is(err, ErrPayloadMismatch):
		return cl.fail(OutcomeMismatch, err)
	}
	return cl.fail(OutcomeUnavailable, storeErr(cl.ctx, "writing record", err))
}

// classify wraps a write error as the call returns it.
func (cl *Claim) classify(err error) error {
	if errors.Is(err, ErrInFlight) || errors.Is(err, ErrPayloadMismatch) {
		return err
	}
	return storeErr(cl.ctx, "writing record", err)
}

// finished ends a Tx-mode call whose function ran: next is the outcome (written, or FAILED and not
// written), val and ferr what the function returned. When cache is set, next is committed and may
// be cached.
func (cl *Claim) finished(next *Record, val []byte, ferr error, cache bool) (Result, error) {
	g := cl.g
	cl.done = true
	cl.rec = *next
	cl.ev.Outcome, cl.ev.Fence, cl.ev.Status, cl.ev.Err = OutcomeExecuted, next.Fence, next.Status, ferr
	var cached []byte
	var ttl = g.opts.CacheTTL
	if cache && !cl.callerTx && next.Status.Terminal() {
		cached, ttl = g.cacheEntry(next, g.opts.Now())
	}
	if cl.locked {
		dctx, cancel := cl.detached(cl.ctx)
		cl.releaseLock(dctx, cached, ttl)
		cancel()
	}
	g.report(cl.ctx, &cl.ev, cl.rawKey, cl.end, cl.start)
	if ferr != nil {
		return Result{Value: answered(val), Fence: next.Fence}, ferr
	}
	return Result{Value: answered(next.Response), Fence: next.Fence}, nil
}

// writtenAt readies next, the record a Tx-mode call writes once its function returned, to be written
// at now: it counts for Options.TTL from then. Counted from the call's start, the record of a function
// that outlasted TTL would be written already expired, and the duplicate right after the answer would
// run the function again.
func (cl *Claim) writtenAt(next *Record, now time.Time) {
	next.UpdatedAt, next.ExpiresAt = now, now.Add(cl.g.opts.TTL)
}

// keepMark moves the expiry of a mark written in the transaction tx before its function, when the
// function outlasted it, to Options.TTL from now: committed as it was, the mark would count no more,
// and the duplicate right after the answer would run the function again (TxMark, MarkTx). A mark
// still counting is left as it is, at no cost.
func (cl *Claim) keepMark(ctx context.Context, tx Store) error {
	now := cl.g.opts.Now()
	if now.Before(cl.rec.ExpiresAt) {
		return nil
	}
	next := cl.rec
	next.ExpiresAt, next.UpdatedAt = now.Add(cl.g.opts.TTL), now
	if err := tx.Update(ctx, &next, cl.rec.Version()); err != nil {
		return err
	}
	cl.rec = next
	return nil
}

// unstorableError carries a Store's refusal of an outcome from txCommit to txFailed.
type unstorableError struct{ err error }

func (e *unstorableError) Error() string { return e.err.Error() }
func (e *unstorableError) Unwrap() error { return e.err }

// storeCtx is a Store whose calls run on ctx instead of the caller's: the writes after a rollback must
// survive the call's cancellation, as a finish does.
type storeCtx struct {
	Store
	ctx context.Context
}

func (s storeCtx) Insert(_ context.Context, rec *Record) error { return s.Store.Insert(s.ctx, rec) }
func (s storeCtx) Get(_ context.Context, scope, key string) (*Record, error) {
	return s.Store.Get(s.ctx, scope, key)
}
func (s storeCtx) Update(_ context.Context, rec *Record, prev Version) error {
	return s.Store.Update(s.ctx, rec, prev)
}
