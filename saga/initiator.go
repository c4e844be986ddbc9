package saga

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
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
	// Status asks DTM about outcomes. Defaults to a txstatus.Client on Server.
	Status *txstatus.Client
}

// SubmitParams describe one saga.
type SubmitParams struct {
	// Call is the idempotency identity of the operation (scope and client key).
	Call idemkit.Call
	// Steps adds the saga's steps (s.Add(action, compensate, payload)) and sets its options
	// (s.RetryInterval, s.TimeoutToFail, s.Concurrent...). Required.
	Steps func(s *dtmcli.Saga)
	// Result is stored when the saga succeeds and replayed to duplicates.
	Result []byte
}

// Submit claims the record, submits the saga with a fresh gid stored on the record, waits up to Wait
// for the outcome and commits, rolls back or detaches the record accordingly. A duplicate of a finished
// key gets the stored result (Outcome.Replayed) and submits nothing; a duplicate of a running one gets
// idemkit.ErrInFlight. See [hooks.Lifecycle.Run] for errors.
func (i *Initiator) Submit(ctx context.Context, p SubmitParams) (hooks.Outcome, error) {
	if i.Server == "" || i.Lifecycle == nil || p.Steps == nil {
		return hooks.Outcome{}, errors.New("saga: Initiator needs Server and Lifecycle, SubmitParams needs Steps")
	}
	return i.Lifecycle.Run(ctx, hooks.RunParams{
		TransType: "saga",
		Call:      p.Call,
		Status:    cmp.Or(i.Status, &txstatus.Client{Server: i.Server}),
		Wait:      i.Wait,
		Result:    p.Result,
		Start: func(ctx context.Context, gid string) error {
			s := dtmcli.NewSaga(i.Server, gid)
			p.Steps(s)
			return s.Submit()
		},
	})
}
