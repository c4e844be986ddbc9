package tcc_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/txstatus"
)

// TestPermanentTryWrappingRefusalIsRejected: a try error marked permanent that wraps one of DTM's
// refusals (a branch call DTM refused) stays permanent once it is no longer a refusal of the
// prepare: the record is REJECTED and Run returns the rejection. The rewrite dropped the mark, and
// the record ended FAILED (found by a defect hunt).
func TestPermanentTryWrappingRefusalIsRejected(t *testing.T) {
	k := newBank(t)
	c := newCall()
	p := k.runParams(c)
	p.Tries = func(tc *dtmcli.Tcc) error {
		return idemkit.Permanent(fmt.Errorf("card declined: %w", &txstatus.RefusedError{Op: "registerBranch", GID: tc.Gid, Message: "refused"}))
	}
	out, err := k.global.Run(ctxb, p)
	if !errors.Is(err, idemkit.ErrRejected) || out.Status != txstatus.Failed {
		t.Fatalf("Run = %+v, %v; want Failed and a rejection", out, err)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusRejected {
		t.Fatalf("record %s, want REJECTED", rec.Status)
	}
}
