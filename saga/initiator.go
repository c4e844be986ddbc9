package saga

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// Initiator submits sagas. Its zero value is not usable: set Server and Lifecycle. It is safe for
// concurrent use.
type Initiator struct {
	// Server is the DTM HTTP API base, e.g. "http://127.0.0.1:36789/api/dtmsvr".
	Server string
	// Lifecycle keeps the record and runs the hooks.
	Lifecycle *hooks.Lifecycle
	// Wait bounds how long Submit waits for the saga's outcome. Defaults to 0: Submit returns once the
	// saga is submitted, with Status Submitted, and the Reconciler settles the record later.
	Wait time.Duration
	// Status submits the saga and asks DTM about its outcome, with its HTTP client (and its
	// timeout); it must talk to Server. Defaults to a txstatus.Client on Server; one whose Server is
	// empty (set for its HTTP client or PollInterval) talks to Server too.
	Status *txstatus.Client
}

// SubmitParams describe one saga.
type SubmitParams struct {
	// Call is the idempotency identity of the operation (scope and client key).
	Call idemkit.Call
	// Steps adds the saga's steps (s.Add(action, compensate, payload)) and sets its options
	// (s.RetryInterval, s.TimeoutToFail, s.Concurrent...). Required. s.WaitResult is ignored
	// (Initiator.Wait waits for the outcome): with it DTM answers a saga not yet succeeded with
	// the same FAILURE as a refusal to start one. Steps must not change s.Gid or s.TransType: the
	// record, the wait and the Reconciler follow the gid Submit chose (GID) as a saga, and a saga
	// submitted under another gid or type would run unfollowed (a retry of the key running it again).
	// Submit refuses such a saga before anything is sent (see Submit). dtmcli stores a step's
	// payload JSON-encoded: give s.Add a value (a struct, a pointer to one, a map), never a string
	// or []byte holding JSON already marshalled, which it stores as a JSON string (base64 for a
	// []byte) that a step decoding the JSON into its type (dtmhttp.Gorm, dtmhttp.Redis) cannot
	// read: a malformed payload, whose action answers 409, so the saga rolls back on every call.
	Steps func(s *dtmcli.Saga)
	// Result is the saga's result (an order id...): stored with the claim, returned in
	// Outcome.Result when the saga succeeds, and replayed to duplicates. See hooks.RunParams.Result.
	Result []byte
	// GID is the saga's gid. Defaults to a fresh one; see hooks.RunParams.GID.
	GID string
}

// Submit claims the record, submits the saga with a fresh gid stored on the record, waits up to Wait
// for the outcome and commits, rolls back or detaches the record accordingly. A duplicate of a finished
// key gets the stored result (Outcome.Replayed) and submits nothing; a duplicate of a running one gets
// idemkit.ErrInFlight. See [hooks.Lifecycle.Run] for errors.
//
// The submit is posted with ctx through Status's HTTP client. Only DTM's own refusal (409 FAILURE)
// rolls the record back at once — and a submit that could not even connect to DTM (never sent: an
// error matching txstatus.ErrNotSent, returned, an outage to retry); a timeout, a reset connection or
// a 5xx from a proxy in front of DTM leaves the record PROCESSING for the reconciler, since DTM may
// have accepted the saga. DTM's refusal of a submit sent a second time (by an HTTP client or a gateway
// that sent it again after the first answer was lost) once the saga the first one started is no
// longer running is no refusal: DTM holds the gid as a saga with this call's steps and payloads, and
// Submit follows it. A rolled-back
// saga reports DTM's rollback reason (the failing step's message) in Outcome.Reason; its record is
// FAILED, on the first call as on a replay (a step's failure is never REJECTED: a retry with the key
// runs a new saga). A saga whose Steps add no step is not submitted: the record is rolled back, its
// reason a *txstatus.RefusedError with Local set ("txstatus: idemkit refused submit of …"), matching
// txstatus.ErrRefused. So is a saga whose Steps panic (dtmcli's Add panics on a payload it cannot
// marshal): nothing is submitted, the record is rolled back, then the panic goes on with its value.
// So is a saga whose Steps changed its Gid or TransType (which no wait, query or Reconciler of the
// record would follow): nothing is submitted, the record is rolled back, and Submit returns, beside the
// Outcome (Failed, with that reason), an error saying Steps must not change them, matching
// txstatus.ErrRefused.
//
// A submit that lands on the gid after a Reconciler fenced it — between the fence's prepare and abort,
// when DTM v1.19 accepts it onto the fence's empty transaction and reports it succeeded without running
// any step — is reported Failed, never started, and the record rolled back, by Submit as by the
// Reconciler (see txstatus.Client.Fence).
func (i *Initiator) Submit(ctx context.Context, p SubmitParams) (hooks.Outcome, error) {
	if i.Server == "" || i.Lifecycle == nil || p.Steps == nil {
		return hooks.Outcome{}, errors.New("saga: Initiator needs Server and Lifecycle, SubmitParams needs Steps")
	}
	status := i.Status.On(i.Server)
	var panicked *stepsPanic // Steps panicked: nothing was sent
	var changed error        // Steps changed the saga's gid or type: nothing was sent
	out, err := i.Lifecycle.Run(ctx, hooks.RunParams{
		TransType: "saga",
		Call:      p.Call,
		Status:    status,
		Wait:      i.Wait,
		Result:    p.Result,
		GID:       p.GID,
		Start: func(ctx context.Context, gid string) error {
			s := dtmcli.NewSaga(i.Server, gid)
			if panicked = addSteps(p.Steps, s); panicked != nil {
				// Nothing was sent: the record is rolled back, the key free again, before the panic
				// goes on.
				return idemkit.Retryable(&txstatus.RefusedError{Op: "submit", GID: gid, Message: fmt.Sprintf("saga: Steps panicked, nothing was submitted: %v", panicked.value), Local: true})
			}
			if s.Gid != gid || s.TransType != "saga" {
				// Submitted, it would run under a gid (or as a type) the record does not know: no
				// wait, query or fence of the record's gid would follow it, and a retry of the key,
				// the record settled FAILED, would run it again.
				changed = &txstatus.RefusedError{Op: "submit", GID: gid, Local: true, Message: fmt.Sprintf(
					"saga: Steps changed the saga's gid or type (to %q, %q): Steps must not change s.Gid (the record's %q) nor s.TransType (%q); nothing was submitted",
					s.Gid, s.TransType, gid, "saga")}
				return idemkit.Retryable(changed)
			}
			if len(s.Steps) == 0 {
				// Nothing to run; and a saga that succeeded without a branch is how DTM reports a submit
				// that landed on a fence's empty transaction (see txstatus.Info.RanNothingFor).
				return idemkit.Retryable(&txstatus.RefusedError{Op: "submit", GID: gid, Message: "saga: a saga without steps is not submitted", Local: true})
			}
			// DTM answers a submit with WaitResult set FAILURE when the saga has not succeeded by
			// then (a step still retrying), which cannot be told from its refusal to start one:
			// Submit would roll the record back while the saga runs on. Initiator.Wait waits instead.
			s.WaitResult = false
			s.BuildCustomOptions() // what dtmcli's Submit does before it posts
			// DTM's answer (or a gateway's), never the business's: retryable whatever the Guard's
			// Options.IsPermanent says, should the saga roll back with it as the reason.
			err := status.Call(ctx, "submit", gid, &s.TransBase)
			if resentAndLanded(ctx, status, gid, s, err) {
				// Refused because this very submit, sent before, had started the saga, which has
				// run since: the saga is this call's, and Run follows it.
				return nil
			}
			return idemkit.Retryable(err)
		},
	})
	if panicked != nil {
		panic(panicked.value)
	}
	if changed != nil {
		// A bug of the caller's, not a saga that rolled back: said as an error too.
		err = errors.Join(changed, err)
	}
	return out, err
}

// resentAndLanded reports whether err, DTM's answer to the submit of s, is its refusal of a submit sent
// a second time — by an HTTP client or a gateway in front of DTM that sent it again after the first
// answer was lost — once the saga the first one started was no longer running (DTM v1.19 refuses to
// submit a gid it holds as succeed, aborting or failed): DTM holds gid as a saga with exactly s's
// steps and payloads. Another transaction holding gid does not pass: a Reconciler's fence (an empty
// TCC), a saga submit that landed on one (no branch), another call's saga under a reused gid. A
// refusal by idemkit (nothing sent), or one DTM cannot be asked about, is not.
func resentAndLanded(ctx context.Context, status *txstatus.Client, gid string, s *dtmcli.Saga, err error) bool {
	var refused *txstatus.RefusedError
	if !errors.As(err, &refused) || refused.Local || len(s.Payloads) != len(s.Steps) {
		return false
	}
	// Asked whether or not the caller is still there, as Run asks about a start that failed.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), txstatus.DefaultTimeout)
	defer cancel()
	info, branches, qerr := status.QueryBranches(qctx, gid)
	if qerr != nil || info.TransType != "saga" || len(branches) != 2*len(s.Steps) {
		return false
	}
	held := make(map[[2]string]txstatus.Branch, len(branches))
	for _, b := range branches {
		held[[2]string{b.BranchID, b.Op}] = b
	}
	for i, step := range s.Steps {
		id := fmt.Sprintf("%02d", i+1) // DTM's branch ids of a saga's steps
		for _, op := range []string{barrier.OpAction, barrier.OpCompensate} {
			b, ok := held[[2]string{id, op}]
			if !ok || b.URL != step[op] || string(b.Payload) != s.Payloads[i] {
				return false
			}
		}
	}
	return true
}

// stepsPanic is the value SubmitParams.Steps panicked with.
type stepsPanic struct{ value any }

// addSteps calls steps on s and returns the panic it raised, if any (dtmcli's Saga.Add panics on a
// payload it cannot marshal).
func addSteps(steps func(*dtmcli.Saga), s *dtmcli.Saga) (panicked *stepsPanic) {
	defer func() {
		if v := recover(); v != nil {
			panicked = &stepsPanic{value: v}
		}
	}()
	steps(s)
	return nil
}
