package dtmmsg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/background"
	"github.com/idemkit/idemkit/internal/ownedtx"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/txstatus"
)

const (
	// TransType is the DTM transaction type of a 2-phase message, as reported to hooks (Txn.TransType).
	TransType = "msg"
	// GIDPrefix starts the gid of every message Publish publishes: the [Reconciler] settles only
	// records whose gid has it.
	GIDPrefix = "msg-"
)

// Publisher publishes guarded 2-phase messages. Set Server, DB, Barrier, Lifecycle and QueryPrepared;
// the rest is optional. A Publisher is safe for concurrent use; do not change its fields afterwards.
type Publisher struct {
	// Server is the DTM HTTP API base, e.g. "http://127.0.0.1:36789/api/dtmsvr".
	Server string
	// DB is the business database: the local transactions run on it, and its barrier table (Barrier)
	// lives in it.
	DB *gorm.DB
	// Barrier is the barrier on DB that the local transactions enter and that [BackCheck] queries.
	Barrier *barrier.Gorm
	// Lifecycle keeps the record and runs the hooks (its Guard may use another database).
	Lifecycle *hooks.Lifecycle
	// QueryPrepared is the URL where DTM reaches [BackCheck], e.g. "http://svc:8080/dtm/query-prepared".
	QueryPrepared string
	// Wait bounds how long Publish waits for DTM to report the message succeeded (its branches all
	// answered success). Defaults to 0: Publish returns once the message is submitted, with Status
	// Submitted, and the Reconciler settles the record later. Keep the Guard's Lease above Wait plus
	// the prepare's and the local transaction's longest time: the Reconciler settles records whose
	// lease ran out, and one it back-checks while the local transaction still runs waits for that
	// transaction's barrier row (a pass held up), or, when the prepare itself outlasted the lease,
	// fences the publication, which then returns ErrLocalFailed with the key free.
	Wait time.Duration
	// Status prepares, submits and aborts the message and asks DTM about outcomes, with its HTTP client
	// (and its timeout); it must talk to Server. Defaults to a txstatus.Client on Server; one whose
	// Server is empty (set for its HTTP client or PollInterval) talks to Server too.
	Status *txstatus.Client
}

// PublishParams describe one message.
type PublishParams struct {
	// Call is the idempotency identity of the operation (scope and client key).
	Call idemkit.Call
	// Steps adds the message's branches (m.Add(url, payload)) and sets its options (m.TimeoutToFail,
	// m.RetryInterval...; DTM asks the back-check once TimeoutToFail passed without a submit).
	// Required. It must not change m.Gid nor m.TransType: Publish then prepares nothing, runs no
	// Local, rolls the record back (the key free again) and returns an Outcome Failed with an error
	// saying so, matching txstatus.ErrRefused.
	Steps func(m *dtmcli.Msg)
	// Local is the local transaction: the business writes, made through tx, which commit together with
	// the message's barrier row; gid is the message's. Its error rolls them back and nothing is published: an error marked
	// idemkit.Permanent leaves the record REJECTED (replayed to duplicates), any other FAILED (a retry
	// with the key publishes anew). Publish ends the transaction: tx refuses Commit and Rollback
	// (record.Sealed), and, after a statement whose error ended the transaction on the server (a
	// MySQL/MariaDB deadlock rolls it back), every later statement — a Local that returns nil all
	// the same fails, with an error wrapping record.ErrTxAborted, as a PostgreSQL transaction a failed
	// statement aborted does at its COMMIT. Required.
	Local func(ctx context.Context, tx *gorm.DB, gid string) error
	// Result is stored with the claim (as Call.Result, unless that is set), returned in
	// Outcome.Result once the local transaction committed, and replayed to duplicates once the
	// message succeeded, as hooks.RunParams.Result is.
	Result []byte
}

// ErrLocalFailed wraps the error of a local transaction that did not commit: nothing was published.
var ErrLocalFailed = errors.New("dtmmsg: local transaction failed, nothing published")

// Publish publishes one message for p.Call: claim the record with a fresh gid, prepare the message
// at DTM, run the local transaction with the barrier row, submit, wait up to Wait for the outcome and
// settle the record.
//
// It returns, besides an Outcome (GID, Status: Succeed, Failed, or Submitted when the outcome was not
// known in time):
//   - a replayed Outcome (Replayed, Result) for a finished key, with an *idemkit.RejectedError for a
//     stored permanent failure; idemkit.ErrInFlight while another publication of the key runs; Guard
//     errors (idemkit.ErrStoreUnavailable...), and nothing is published;
//   - an error matching txstatus.ErrNotSent when the prepare could not even connect to DTM (refused,
//     no route, a dial timeout, ctx ended first): nothing was sent, nothing is published, and the
//     record is FAILED, the key free again — an outage, to retry later, as for sagas and TCCs;
//   - an error wrapping the prepare's error when DTM refused it (txstatus.ErrRefused) or its answer
//     was lost (txstatus.ErrNoAnswer: a timeout, ctx ended while DTM did not answer, a gateway's 5xx):
//     nothing is published, the record is FAILED once the back-check's row that keeps the local
//     transaction from ever committing is written (barrier.Gorm.QueryPrepared), or left PROCESSING
//     for the Reconciler when that write failed too (the error says so);
//   - an error matching txstatus.ErrRefused, with an Outcome Failed, when Steps changed m.Gid or
//     m.TransType: nothing was prepared, Local did not run, and the record is FAILED, the key free
//     again;
//   - an error matching ErrLocalFailed and wrapping Local's error when the local transaction did not
//     commit: nothing is published, the message is aborted, the record FAILED or REJECTED — when
//     REJECTED, the error also matches idemkit.ErrRejected, and errors.As finds the
//     *idemkit.RejectedError with the stored message that every replay of the key returns;
//   - an error, with an Outcome Failed, when the local transaction committed but DTM reports the
//     message failed (its back-check answered FAILURE: one that does not read Barrier's table): it
//     will not be delivered, and the record is left PROCESSING for an operator, the key in flight
//     — rolled back, a retry would run Local again;
//   - an error when the outcome of the local transaction cannot be known (its commit failed and the
//     database cannot answer — within Wait, or txstatus.DefaultTimeout when longer, once the caller
//     left): the record stays PROCESSING; DTM's back-check and the Reconciler settle it.
//
// The prepare is posted through Status's HTTP client and bounded by ctx (and that client's timeout);
// the fence and the record's settlement after a failed prepare outlive ctx, as after a failed local
// transaction. The submit, and the abort after a failed local transaction, are posted whether or not
// ctx ended, and their answer waited for no longer than Wait, or txstatus.DefaultTimeout when longer.
//
// A failed submit after the local commit (refused, unanswered) is not an error: DTM's back-check finds
// the commit and publishes the message; the Outcome's Reason carries the submit error.
//
// A panic in Steps or Local (dtmcli's Msg.Add panics on a payload it cannot marshal) goes on once the
// publication is settled as a retryable failure would be: nothing is published, the local transaction
// rolled back and fenced, the message aborted and the record FAILED, the key free again.
func (p *Publisher) Publish(ctx context.Context, pp PublishParams) (hooks.Outcome, error) {
	if p.Server == "" || p.DB == nil || p.Barrier == nil || p.Lifecycle == nil || p.QueryPrepared == "" ||
		pp.Steps == nil || pp.Local == nil {
		return hooks.Outcome{}, errors.New("dtmmsg: Publisher needs Server, DB, Barrier, Lifecycle and QueryPrepared; PublishParams needs Steps and Local")
	}
	status := p.Status.On(p.Server)
	gid := GIDPrefix + txstatus.NewGID()
	call := pp.Call
	if call.Result == nil {
		call.Result = pp.Result // stored with the claim: a reconciled record replays it too
	}
	t, res, err := p.Lifecycle.Begin(ctx, TransType, gid, call)
	if t == nil {
		if res.Replayed {
			return hooks.Outcome{Replayed: true, Result: res.Value}, err
		}
		return hooks.Outcome{}, err
	}
	out := hooks.Outcome{GID: gid}

	// The message is built with dtmcli and its calls posted through status: dtmcli's take no context,
	// its default client has no timeout, and it cannot tell a DTM that could not be reached from one
	// whose answer was lost.
	m := dtmcli.NewMsg(p.Server, gid)
	inSteps := true
	defer func() {
		if inSteps { // Steps panicked (dtmcli's Add panics on a payload it cannot marshal): nothing was sent
			sctx, cancel := background.Settling(ctx)
			defer cancel()
			_ = p.Lifecycle.Rollback(sctx, t, idemkit.Retryable(fmt.Errorf("%w: never prepared: %w", hooks.ErrRolledBack, errPanicked)))
		}
	}()
	pp.Steps(m)
	inSteps = false
	if m.Gid != gid || m.TransType != TransType {
		// Prepared, the message would run under a gid (or as a type) the record and the local
		// transaction's barrier row do not know: DTM's back-check of it would find no row and answer
		// FAILURE though the local transaction committed, and no wait, query or Reconciler of the
		// record's gid would follow it. Nothing is sent, Local does not run, and the key is free again.
		changed := &txstatus.RefusedError{Op: "prepare", GID: gid, Local: true, Message: fmt.Sprintf(
			"dtmmsg: Steps changed the message's gid or type (to %q, %q): Steps must not change m.Gid (the record's %q) nor m.TransType (%q); nothing was prepared",
			m.Gid, m.TransType, gid, TransType)}
		sctx, cancel := background.Settling(ctx)
		defer cancel()
		out.Status, out.Reason = txstatus.Failed, changed
		return out, errors.Join(changed, p.Lifecycle.Rollback(sctx, t, idemkit.Retryable(fmt.Errorf("%w: never prepared: %w", hooks.ErrRolledBack, changed))))
	}
	m.QueryPrepared = p.QueryPrepared
	if perr := status.Call(ctx, "prepare", gid, &m.TransBase); perr != nil {
		out.Reason = perr
		reason := idemkit.Retryable(fmt.Errorf("%w: never prepared: %w", hooks.ErrRolledBack, perr))
		// The record is settled whether or not the caller is still there: its deadline may be what
		// ended the prepare.
		sctx, cancel := background.Settling(ctx)
		defer cancel()
		if errors.Is(perr, txstatus.ErrNotSent) {
			// DTM could not be connected to: it never heard of the gid and will never back-check it;
			// there is nothing to fence or abort. The key is free again, and the caller is told of an
			// outage (retry later), as saga and tcc tell it.
			out.Status = txstatus.Failed
			return out, errors.Join(fmt.Errorf("dtmmsg: preparing %s: %w (nothing prepared; the key is free again)", gid, perr),
				p.Lifecycle.Rollback(sctx, t, reason))
		}
		// Refused, or the answer lost: whether or not DTM recorded the prepare, the local transaction
		// has not run. Fence it for good so a late back-check answers FAILURE, then tell DTM (best
		// effort, within the caller's bounds) and free the key.
		qctx, qcancel := outlive(ctx, max(p.Wait, txstatus.DefaultTimeout))
		qerr := p.Barrier.QueryPrepared(qctx, gid)
		qcancel()
		if !errors.Is(qerr, barrier.ErrMsgRolledBack) {
			p.Lifecycle.Detach(sctx, t)
			return out, fmt.Errorf("dtmmsg: preparing %s: %w (and fencing it failed: %w)", gid, perr, qerr)
		}
		_ = status.Call(ctx, "abort", gid, &m.TransBase)
		out.Status = txstatus.Failed
		return out, errors.Join(fmt.Errorf("dtmmsg: preparing %s: %w", gid, perr), p.Lifecycle.Rollback(sctx, t, reason))
	}

	var localErr error // Local's own error: any other is the barrier's or the database's
	inLocal := true
	defer func() {
		if inLocal { // Local panicked, its transaction rolled back (the panic goes on): settled as its error would be
			p.unpublished(ctx, status, t, m, errPanicked)
		}
	}()
	// On a connection of its own (package internal/ownedtx): one whose COMMIT or ROLLBACK failed is
	// never returned to the pool with the transaction still open on the server.
	lerr := ownedtx.Transaction(ctx, p.DB, func(tx *gorm.DB) error {
		b, err := barrier.MsgBranch(gid)
		if err != nil {
			return err
		}
		if _, err := p.Barrier.Enter(ctx, tx, b); err != nil {
			return err // ErrDuplicate: the back-check already decided this message failed
		}
		biz, lost := record.Watched(tx)
		if localErr = pp.Local(ctx, biz, gid); localErr != nil {
			return localErr
		}
		// Local ignored the error of a statement that ended the transaction (a MySQL/MariaDB
		// deadlock rolled it back, the barrier row with it, and its session refused every later
		// statement): the COMMIT would succeed with nothing in it, and the message be published.
		return lost()
	})
	inLocal = false
	if lerr != nil && localErr == nil {
		// The barrier's refusal or the database's failure (a commit), not the business's: retryable
		// whatever the Guard's Options.IsPermanent says.
		lerr = idemkit.Retryable(lerr)
	}
	if lerr != nil {
		// Did the local transaction commit after all (a lost commit reply)? The barrier knows, and
		// asking fences it when it did not. It is asked, and the record settled, whether or not the
		// caller is still there: its cancellation may be why the commit failed, and the database can
		// answer all the same. Not for ever: the question waits on the row's lock while the local
		// transaction is open on the server (a commit whose reply was lost), and a caller gone no
		// longer bounds it.
		qctx, qcancel := outlive(ctx, max(p.Wait, txstatus.DefaultTimeout))
		qerr := p.Barrier.QueryPrepared(qctx, gid)
		qcancel()
		ctx, cancel := background.Settling(ctx)
		defer cancel()
		switch {
		case qerr == nil:
			lerr = nil // committed: publish
		case errors.Is(qerr, barrier.ErrMsgRolledBack):
			_ = p.call(ctx, status, "abort", m) // best effort: the back-check answers FAILURE anyway
			out.Status, out.Reason = txstatus.Failed, lerr
			reason := lerr
			if !p.Lifecycle.IsPermanent(lerr) {
				reason = idemkit.Retryable(fmt.Errorf("%w: %w", hooks.ErrRolledBack, lerr))
			}
			rerr := p.Lifecycle.Rollback(ctx, t, reason)
			err := errors.Join(fmt.Errorf("%w: %w", ErrLocalFailed, lerr), rerr)
			if rerr == nil && t.Record.Status == idemkit.StatusRejected {
				// A permanent failure, recorded: the shape every replay of the key returns.
				err = &rejection{rej: &idemkit.RejectedError{Message: t.Record.Error}, cause: err}
			}
			return out, err
		default:
			p.Lifecycle.Detach(ctx, t)
			return out, fmt.Errorf("dtmmsg: local transaction of %s: %w (and its outcome is unknown: %w)", gid, lerr, qerr)
		}
	}

	// Committed: the message will be delivered, and its result is what every replay returns.
	out.Result = call.Result
	m.BuildCustomOptions() // what dtmcli's Submit does before it posts: the message's delay
	if serr := p.call(ctx, status, "submit", m); serr != nil {
		out.Reason = serr // DTM's back-check will find the commit and publish
	}
	out.Status = txstatus.Submitted
	if p.Wait > 0 {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.Wait)
		st, werr := status.Wait(wctx, gid)
		cancel()
		if werr != nil {
			p.Lifecycle.Detach(ctx, t)
			return out, nil // published (or about to be); the Reconciler settles the record
		}
		if st.Final() || st == txstatus.Submitted {
			out.Status = st
		}
		// Otherwise DTM still holds it prepared (the submit failed): the local transaction committed,
		// so its back-check will submit it. Submitted, as without a Wait.
	}
	switch out.Status {
	case txstatus.Succeed:
		out.Reason = nil // delivered: a lost answer to its submit is no reason
	case txstatus.Failed:
		// The local transaction committed, yet DTM failed the message (a back-check answered FAILURE:
		// one that does not read this Barrier's table, at a QueryPrepared URL of another service or
		// database): it will not be delivered. Rolled back, the record would free the key, and a
		// retry run Local again; it is left PROCESSING for an operator, as the Reconciler leaves it.
		out.Result = nil
		p.Lifecycle.Detach(ctx, t)
		return out, fmt.Errorf("dtmmsg: message %s: its local transaction committed but DTM reports it failed (does QueryPrepared reach the back-check of this Publisher's Barrier?): "+
			"not delivered, the record left PROCESSING for an operator", gid)
	}
	// The local transaction committed: the message is published whether or not the caller is still
	// there, and the hooks and the record follow it (as the wait does).
	sctx, cancelSettle := background.Settling(ctx)
	defer cancelSettle()
	err = p.Lifecycle.Conclude(sctx, t, out.Status, call.Result)
	if errors.Is(err, idemkit.ErrFenced) && out.Status.Final() {
		return out, nil // a Reconciler settled the record first, from the same outcome
	}
	return out, err
}

// errPanicked is the rollback reason of a publication whose Steps or Local panicked: retryable,
// whatever the Guard's Options.IsPermanent says.
var errPanicked = idemkit.Retryable(errors.New("dtmmsg: panic in Steps or Local"))

// unpublished settles the publication t of message m, whose local transaction did not commit (it
// panicked): the barrier fences it for good, DTM is told to abort (best effort) and the record is
// rolled back with reason — or left PROCESSING for the Reconciler when the fence could not be written.
func (p *Publisher) unpublished(ctx context.Context, status *txstatus.Client, t *hooks.Txn, m *dtmcli.Msg, reason error) {
	qctx, qcancel := outlive(ctx, max(p.Wait, txstatus.DefaultTimeout))
	qerr := p.Barrier.QueryPrepared(qctx, m.Gid)
	qcancel()
	sctx, cancel := background.Settling(ctx)
	defer cancel()
	if !errors.Is(qerr, barrier.ErrMsgRolledBack) {
		p.Lifecycle.Detach(sctx, t)
		return
	}
	_ = p.call(sctx, status, "abort", m)
	_ = p.Lifecycle.Rollback(sctx, t, idemkit.Retryable(fmt.Errorf("%w: %w", hooks.ErrRolledBack, reason)))
}

// call posts op (the submit, or an abort, once the local transaction's outcome is known) for m through
// status, whether or not the caller is still there, bounded by Wait, or txstatus.DefaultTimeout when
// longer: the answer is not waited for past that (DTM's back-check decides a message left prepared).
func (p *Publisher) call(ctx context.Context, status *txstatus.Client, op string, m *dtmcli.Msg) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(p.Wait, txstatus.DefaultTimeout))
	defer cancel()
	return status.Call(cctx, op, m.Gid, &m.TransBase)
}

// outlive returns a context with ctx's values that ends once ctx has ended and d has passed: ctx's
// own bound, or d when ctx ends sooner.
func outlive(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	octx, cancel := background.Settling(ctx)
	timer := time.AfterFunc(d, func() {
		stop := context.AfterFunc(ctx, cancel)
		context.AfterFunc(octx, func() { stop() })
	})
	return octx, func() { timer.Stop(); cancel() }
}

// rejection is a permanent failure of Local on its first call: the *idemkit.RejectedError a replay of
// the key returns, wrapping the error that caused it.
type rejection struct {
	rej   *idemkit.RejectedError
	cause error
}

func (e *rejection) Error() string   { return e.rej.Error() }
func (e *rejection) Unwrap() []error { return []error{e.rej, e.cause} }
