package tcc_test

import (
	"context"
	"testing"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/txstatus"
)

// TestCancelledCallerAfterTriesStillSubmits: the caller goes away (an HTTP client that disconnects)
// while the tries run; every try succeeds. The transaction exists since its prepare, and Run's wait and
// settlement outlive the caller, as the abort of a failed try does — but the submit was posted with the
// cancelled context, so it was never sent: the TCC stayed prepared with its resources reserved until
// DTM's TimeoutToFail cancelled it, Run returned "status unknown", and the record stayed PROCESSING,
// every retry of the key in flight. It is submitted, and Run follows it to its outcome.
func TestCancelledCallerAfterTriesStillSubmits(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	c := newCall()
	ctx, cancel := context.WithCancel(ctxb)
	defer cancel()
	p := k.runParams(c)
	p.Options = func(tc *dtmcli.Tcc) { tc.RetryInterval, tc.TimeoutToFail = 1, 600 }
	tries := p.Tries
	p.Tries = func(tc *dtmcli.Tcc) error {
		err := tries(tc)
		cancel() // the caller leaves once the tries are done, before the submit
		return err
	}
	out, err := k.global.Run(ctx, p)
	if err != nil || out.Status != txstatus.Succeed || string(out.Result) != `{"transfer":"done"}` {
		t.Fatalf("Run = %+v, %v: want the tried transfer submitted and followed to succeed", out, err)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("record %s, want SUCCEEDED", rec.Status)
	}
	k.checkBalances(t, amount)
}
