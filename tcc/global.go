package tcc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/dtm-labs/client/dtmcli/dtmimp"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// Global runs TCC global transactions. Its zero value is not usable: set Server and Lifecycle. It is
// safe for concurrent use.
type Global struct {
	// Server is the DTM HTTP API base, e.g. "http://127.0.0.1:36789/api/dtmsvr".
	Server string
	// Lifecycle keeps the record and runs the hooks.
	Lifecycle *hooks.Lifecycle
	// Wait bounds how long Run waits for the confirms or cancels to finish after the tries. Defaults
	// to 0: Run returns after submitting (or aborting) and the Reconciler settles the record later.
	Wait time.Duration
	// Status prepares, submits and aborts the transaction and asks DTM about its outcome, with its
	// HTTP client (and its timeout); it must talk to Server. Defaults to a txstatus.Client on Server;
	// one whose Server is empty (set for its HTTP client or PollInterval) talks to Server too.
	Status *txstatus.Client
}

// RunParams describe one TCC global transaction.
type RunParams struct {
	// Call is the idempotency identity of the operation.
	Call idemkit.Call
	// Tries registers and calls the try branches (t.CallBranch(body, try, confirm, cancel)); an
	// error aborts the transaction, so DTM cancels the tried branches. Required.
	//
	// Return every CallBranch error. CallBranch registers the branch with DTM before it calls the
	// try, so a Tries that ignores a failed try and returns nil submits the transaction with that
	// branch in it, and DTM confirms it although its try never succeeded (the branch barrier lets
	// such a confirm through: it stops only a try after a cancel).
	//
	// Give CallBranch a body dtmcli encodes as JSON — a struct, a pointer to one, a map — never a
	// []byte or a string holding JSON: dtmcli sends those to the try as they are, but registers
	// their JSON encoding (a base64 or quoted string) as the payload DTM sends the confirm and the
	// cancel, which then cannot decode it (dtmhttp.Decode: ErrMalformedPayload, answered 500, and
	// retried by DTM for ever, the try's reservation held).
	//
	// Tries must not change t.Gid or t.TransType (see Options).
	Tries func(t *dtmcli.Tcc) error
	// Options sets the transaction's options before it is prepared (t.TimeoutToFail,
	// t.RetryInterval...). Optional. t.WaitResult is ignored: Global.Wait waits for the outcome
	// (DTM answers a submit or an abort with WaitResult 500 while a confirm or cancel fails, as if
	// the call went unanswered). Options (and Tries) must not change t.Gid or t.TransType: the
	// record, the wait and the Reconciler follow the gid Run chose (GID) as a TCC, and a transaction
	// prepared, tried or submitted under another gid or type would run unfollowed (a retry of the key
	// running it again). Run refuses such a change (see Run).
	Options func(t *dtmcli.Tcc)
	// Result is the transaction's result (an order id...): stored with the claim, returned in
	// Outcome.Result when it succeeds, and replayed to duplicates. See hooks.RunParams.Result.
	Result []byte
	// GID is the transaction's gid. Defaults to a fresh one; see hooks.RunParams.GID.
	GID string
}

// Run claims the record, prepares the global transaction with a fresh gid stored on the record, runs
// the tries, submits (or aborts when a try failed), waits up to Wait for the outcome and commits, rolls
// back or detaches the record. See [hooks.Lifecycle.Run] for results and errors.
//
// Prepare, submit and abort are posted through Status's HTTP client (dtmcli's try calls, made by
// Tries, take no context): the prepare with ctx; the submit or abort that follows the tries whether or
// not ctx was cancelled meanwhile, since the transaction exists by then. A submit that could not be
// sent (an error matching txstatus.ErrNotSent: DTM restarting) is posted again for up to 5 s; one whose
// answer was lost is not, since DTM v1.19 takes a second submit of a TCC it holds as submitted for one
// without branches and marks it succeed, whatever became of its confirms (nor must anything between
// the initiator and DTM post a submit again: a gateway retrying POSTs). Only DTM's own refusal of the
// prepare (409 FAILURE), or a prepare that could not even connect to DTM (an error matching
// txstatus.ErrNotSent, returned: an outage, retry later), rolls the record back at once; a timeout, a reset connection or a 5xx from a proxy in front of DTM leaves the record
// PROCESSING for the reconciler. A try that fails makes Run abort: DTM cancels what was tried and
// Outcome.Reason carries the try's error. The record is then FAILED (a retry with the key runs anew),
// unless the error is permanent (marked idemkit.Permanent, or so classified by the Guard's
// IsPermanent): the record is REJECTED, and Run returns, beside the
// Outcome with Status Failed, the error every replay of the key returns — errors.As finds an
// *idemkit.RejectedError (see [hooks.Lifecycle.Run]). A Reconciler that settles the record instead
// (Wait ran out first) records it REJECTED too, from DTM's rollback reason: an abort DTM does not
// answer is posted again for up to 5 s. One that never reached it (DTM unreachable for longer) leaves
// the TCC prepared until DTM aborts it at its TimeoutToFail, with a reason of its own: Run, if it
// still waits then, records the try's error all the same, FAILED or REJECTED as above (see
// hooks.AbortError), while a Reconciler records DTM's reason (FAILED). A panic in Tries aborts the
// transaction (the abort posted again as a failed try's is), which the record follows, and one in
// Options rolls the record back (nothing was prepared); then the panic goes on with its value.
//
// Options or Tries that change t.Gid or t.TransType (which no wait, query or Reconciler of the record
// would follow) are refused: a change by Options rolls the record back before anything is prepared
// (the Outcome Failed, its reason matching txstatus.ErrRefused); one by Tries aborts the record's
// transaction (its gid and type restored first, nothing submitted), which the record follows (FAILED,
// not REJECTED). Either way Run also returns an error saying the callback must not change them.
func (g *Global) Run(ctx context.Context, p RunParams) (hooks.Outcome, error) {
	if g.Server == "" || g.Lifecycle == nil || p.Tries == nil {
		return hooks.Outcome{}, errors.New("tcc: Global needs Server and Lifecycle, RunParams needs Tries")
	}
	status := g.Status.On(g.Server)
	var panicked *optionsPanic // Options panicked: nothing was sent
	var changed *changedError  // Options or Tries changed the gid or type
	out, err := g.Lifecycle.Run(ctx, hooks.RunParams{
		TransType: "tcc",
		Call:      p.Call,
		Status:    status,
		Wait:      g.Wait,
		Result:    p.Result,
		GID:       p.GID,
		Start: func(ctx context.Context, gid string) error {
			// dtmcli registers the branches at Server+"/registerBranch": without the trailing slash
			// txstatus tolerates, or DTM answers 404 to ".../api/dtmsvr//registerBranch".
			t := &dtmcli.Tcc{TransBase: *dtmimp.NewTransBase(gid, "tcc", strings.TrimSuffix(g.Server, "/"), "")}
			if panicked = setOptions(p.Options, t); panicked != nil {
				// Nothing was sent: the record is rolled back, the key free again, before the panic
				// goes on. (A panic in Tries, after the prepare, aborts the transaction, which the
				// record follows: see hooks.Lifecycle.Run.)
				return idemkit.Retryable(&txstatus.RefusedError{Op: "prepare", GID: gid, Message: fmt.Sprintf("tcc: Options panicked, nothing was prepared: %v", panicked.value), Local: true})
			}
			if changed = changedBy("Options", t, gid); changed != nil {
				// Nothing was sent: prepared, the transaction would run under a gid (or as a type) the
				// record does not know.
				return idemkit.Retryable(&txstatus.RefusedError{Op: "prepare", GID: gid, Message: changed.Error() + "; nothing was prepared", Local: true})
			}
			err := start(ctx, status, t, p.Tries, g.Lifecycle.IsPermanent)
			errors.As(err, &changed)
			return err
		},
	})
	if panicked != nil {
		panic(panicked.value)
	}
	if changed != nil {
		// A bug of the caller's, not a transaction that rolled back: said as an error too.
		err = errors.Join(changed, err)
	}
	return out, err
}

// changedError says that a callback changed the gid or the type of the transaction Run started.
type changedError struct {
	callback            string // "Options" or "Tries"
	gid, transType      string // what the callback set
	recorded, wantsType string // the record's gid, "tcc"
}

func (e *changedError) Error() string {
	return fmt.Sprintf("tcc: %s changed the transaction's gid or type (to %q, %q): %s must not change t.Gid (the record's %q) nor t.TransType (%q)",
		e.callback, e.gid, e.transType, e.callback, e.recorded, e.wantsType)
}

// changedBy returns the change callback made to t's gid (gid before) or type, nil if none.
func changedBy(callback string, t *dtmcli.Tcc, gid string) *changedError {
	if t.Gid == gid && t.TransType == "tcc" {
		return nil
	}
	return &changedError{callback: callback, gid: t.Gid, transType: t.TransType, recorded: gid, wantsType: "tcc"}
}

// optionsPanic is the value RunParams.Options panicked with.
type optionsPanic struct{ value any }

// setOptions calls options (when set) on t and returns the panic it raised, if any.
func setOptions(options func(*dtmcli.Tcc), t *dtmcli.Tcc) (panicked *optionsPanic) {
	if options == nil {
		return nil
	}
	defer func() {
		if v := recover(); v != nil {
			panicked = &optionsPanic{value: v}
		}
	}()
	options(t)
	return nil
}

// start prepares t, runs the tries and submits it, or aborts it when a try failed or panicked (the
// panic then goes on): what dtmcli.TccGlobalTransaction2 does, with a context and answers that tell
// DTM's refusal from silence.
//
// Only a refused prepare — the call that creates the transaction — is returned as an error matching
// txstatus.ErrRefused, and only a prepare never sent as one matching txstatus.ErrNotSent
// (hooks.RunParams.Start's contract: nothing started). Once the prepare was accepted the transaction
// exists, and a refusal of a later call (the submit of a transaction DTM is already aborting after its
// timeout, or that a Reconciler's fence aborted; an abort after one of those), or a later call that
// could not be sent, is returned without either, so the caller follows the transaction's status. A try error
// permanent by the Lifecycle's rule (permanent: idemkit.Permanent, or the Guard's IsPermanent) is
// given to DTM as a rollback reason starting with hooks.PermanentReason, so a Reconciler that settles
// the record records it REJECTED as the initiator does. A try error whose abort DTM did not
// acknowledge (see abort) is returned in a *hooks.AbortError, marked idemkit.Retryable unless it is
// permanent.
//
// Tries that change t's gid or type make it abort the transaction under its own gid and type (restored
// first): it returns a *changedError (retryable: the record is FAILED, not REJECTED).
func start(ctx context.Context, status *txstatus.Client, t *dtmcli.Tcc, tries func(*dtmcli.Tcc) error, permanent func(error) bool) (err error) {
	// DTM's answers (or a gateway's) are never the business's: they are returned marked
	// idemkit.Retryable, so that the Guard's Options.IsPermanent does not record the key REJECTED
	// when the transaction rolls back with one as the reason. A try's own error is returned as it is.
	//
	// WaitResult (set by Options) is not sent: with it DTM runs the confirms within the submit and
	// the cancels within the abort (it reads it from the options stored at the prepare) and answers
	// 500 while one fails, which cannot be told from an answer lost: the abort, posted again, would
	// make DTM run the cancels and double the TCC's retry interval each time. Run's Wait waits.
	t.WaitResult = false
	if err := status.Call(ctx, "prepare", t.Gid, &t.TransBase); err != nil {
		return idemkit.Retryable(err)
	}
	// The transaction exists: it is submitted or aborted whether or not the caller is still there (the
	// tries, which take no context, ran anyway), as Run's wait and settlement outlive the caller. A
	// cancelled context left it prepared, its resources reserved, until DTM's TimeoutToFail.
	ctx = context.WithoutCancel(ctx)
	gid := t.Gid
	panicked := true
	defer func() {
		if panicked {
			t.Gid, t.TransType = gid, "tcc" // whatever the tries made of them
			// Aborted as after a failed try (posted again while DTM does not answer), then the panic
			// goes on with its value: posted once and lost, the abort left the TCC prepared, its
			// branches' reservations held, until DTM timed it out with a reason of its own.
			t.RollbackReason = "panic in the tries"
			_ = abort(ctx, status, t)
		}
	}()
	tryErr := tries(t)
	panicked = false
	t.WaitResult = false // as for the prepare: the submit's wait_result is the submit's own
	if changed := changedBy("Tries", t, gid); changed != nil {
		// Submitted or aborted as it is, a transaction the record does not know would be: the record's
		// is aborted instead (its tries cancelled), whatever the tries returned.
		t.Gid, t.TransType = gid, "tcc"
		tryErr = idemkit.Retryable(changed)
	}
	perm := tryErr != nil && permanent(tryErr)
	if errors.Is(tryErr, txstatus.ErrRefused) || errors.Is(tryErr, txstatus.ErrNotSent) {
		// Not a refusal of the prepare, nor a prepare never sent (a try that returned such an error):
		// the transaction exists. A permanent try error stays permanent.
		tryErr = &laterRefusal{op: "trying", gid: t.Gid, msg: tryErr.Error()}
		if perm {
			tryErr = idemkit.Permanent(tryErr)
		} else {
			tryErr = idemkit.Retryable(tryErr)
		}
	}
	if tryErr == nil {
		// Posted again while it could not be sent (see post): lost to a DTM restarting, the submit
		// left the TCC prepared, every try's reservation held, until DTM aborted it at its
		// TimeoutToFail, a transaction whose tries all succeeded rolled back.
		if err := post(ctx, status, "submit", t, notSent); err != nil {
			return idemkit.Retryable(exists("submitting", t.Gid, err))
		}
		return nil
	}
	t.RollbackReason = tryErr.Error()
	if perm {
		t.RollbackReason = hooks.PermanentReason + tryErr.Error()
	}
	t.RollbackReason = fitReason(t.RollbackReason)
	if err := abort(ctx, status, t); err != nil {
		// DTM aborts a TCC left prepared past its TimeoutToFail anyway, with a reason of its own: the
		// try's error is the rollback's, as when the abort got through (see hooks.AbortError).
		var lost error = &hooks.AbortError{Reason: tryErr, Err: exists("aborting", t.Gid, err)}
		if !perm {
			lost = idemkit.Retryable(lost)
		}
		return lost
	}
	return tryErr
}

// postPatience bounds how long post posts a submit or an abort again.
const postPatience = txstatus.DefaultTimeout

// abort posts t's abort, which carries its rollback reason to DTM, again while DTM does not answer it
// (see post): DTM stores the reason (a permanent one marked with hooks.PermanentReason, which a
// Reconciler reads) and cancels the tried branches only once an abort reaches it; without one it aborts
// the TCC at its TimeoutToFail with a reason of its own. An abort is safe to post again whatever became
// of the first: DTM accepts one of a TCC it holds as prepared or aborting, and cancels the branches it
// stores (the barrier makes each cancel take effect once).
func abort(ctx context.Context, status *txstatus.Client, t *dtmcli.Tcc) error {
	return post(ctx, status, "abort", t, func(err error) bool { return !errors.Is(err, txstatus.ErrRefused) })
}

// notSent reports whether a call failed without being sent (txstatus.ErrNotSent). Only such a submit
// is posted again: DTM v1.19 takes a submit of a TCC it already holds as submitted for one without
// branches and marks the TCC succeed at once, so a second submit landing after a first that DTM got
// (its answer lost, or a gateway forwarding it late) could end the TCC before its confirms succeeded,
// which DTM would then never retry.
func notSent(err error) bool { return errors.Is(err, txstatus.ErrNotSent) }

// post posts op ("submit" or "abort") of t, the call that ends a prepared TCC, and posts it again
// while it fails with an error for which again reports true, the pause growing from Status's
// PollInterval to a second, for up to postPatience: until one reaches it, DTM holds the TCC prepared,
// every try's reservation with it, until its TimeoutToFail. It returns the last error.
func post(ctx context.Context, status *txstatus.Client, op string, t *dtmcli.Tcc, again func(error) bool) error {
	deadline := time.Now().Add(postPatience)
	pause := status.PollInterval
	if pause <= 0 {
		pause = txstatus.DefaultPollInterval
	}
	for {
		err := status.Call(ctx, op, t.Gid, &t.TransBase)
		if err == nil || !again(err) || time.Now().Add(pause).After(deadline) {
			return err
		}
		time.Sleep(pause) // ctx outlives the caller (see start): nothing to cancel the pause
		pause = min(2*pause, time.Second)
	}
}

// maxRollbackReason is the size of DTM's rollback_reason column (varchar(1024) in its SQL stores), in
// characters: DTM refuses an abort whose reason is longer, which leaves the TCC prepared until it
// times out.
const maxRollbackReason = 1024

// fitReason returns reason as DTM stores it — valid UTF-8, as the JSON request carries it — cut to
// maxRollbackReason characters, the last of them an ellipsis when it was cut.
func fitReason(reason string) string {
	reason = strings.ToValidUTF8(reason, "\uFFFD")
	n := 0
	for i := range reason {
		if n == maxRollbackReason-1 {
			if utf8.RuneCountInString(reason[i:]) > 1 {
				return reason[:i] + hooks.ReasonCut
			}
			break
		}
		n++
	}
	return reason
}

// exists returns the error of a call on the transaction gid made after its prepare was accepted: a
// refusal, or a call never sent, no longer says the transaction did not start, so it is returned
// without ErrRefused or ErrNotSent.
func exists(op, gid string, err error) error {
	if errors.Is(err, txstatus.ErrRefused) || errors.Is(err, txstatus.ErrNotSent) {
		return &laterRefusal{op: op, gid: gid, msg: err.Error()}
	}
	return fmt.Errorf("tcc: %s %s: %w", op, gid, err)
}

// laterRefusal is DTM's refusal of a call on a transaction that exists (its prepare was accepted), or
// such a call that could not be sent. It matches neither txstatus.ErrRefused nor txstatus.ErrNotSent.
type laterRefusal struct{ op, gid, msg string }

func (e *laterRefusal) Error() string {
	return fmt.Sprintf("tcc: %s %s after its prepare was accepted: %s (the transaction exists: follow its status)", e.op, e.gid, e.msg)
}
