package tcc

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/go-resty/resty/v2"

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
	// Status asks DTM about outcomes. Defaults to a txstatus.Client on Server.
	Status *txstatus.Client
}

// RunParams describe one TCC global transaction.
type RunParams struct {
	// Call is the idempotency identity of the operation.
	Call idemkit.Call
	// Tries registers and calls the try branches (t.CallBranch(body, try, confirm, cancel)); an
	// error aborts the transaction, so DTM cancels the tried branches. Required.
	Tries func(t *dtmcli.Tcc) error
	// Options sets the transaction's options before it is prepared (t.TimeoutToFail,
	// t.RetryInterval...). Optional.
	Options func(t *dtmcli.Tcc)
	// Result is stored when the transaction succeeds and replayed to duplicates.
	Result []byte
}

// Run claims the record, prepares the global transaction with a fresh gid stored on the record, runs
// the tries, submits (or aborts when a try failed), waits up to Wait for the outcome and commits, rolls
// back or detaches the record. See [hooks.Lifecycle.Run] for results and errors.
func (g *Global) Run(ctx context.Context, p RunParams) (hooks.Outcome, error) {
	if g.Server == "" || g.Lifecycle == nil || p.Tries == nil {
		return hooks.Outcome{}, errors.New("tcc: Global needs Server and Lifecycle, RunParams needs Tries")
	}
	options := p.Options
	if options == nil {
		options = func(*dtmcli.Tcc) {}
	}
	return g.Lifecycle.Run(ctx, hooks.RunParams{
		TransType: "tcc",
		Call:      p.Call,
		Status:    cmp.Or(g.Status, &txstatus.Client{Server: g.Server}),
		Wait:      g.Wait,
		Result:    p.Result,
		Start: func(ctx context.Context, gid string) error {
			return dtmcli.TccGlobalTransaction2(g.Server, gid, options, func(t *dtmcli.Tcc) (*resty.Response, error) {
				return nil, p.Tries(t)
			})
		},
	})
}
