package tcc_test

import (
	"errors"
	"testing"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/txstatus"
)

// TestGlobalKeyReusedForAnotherPayload: a key reused with another fingerprint — while its TCC runs
// and once it finished — gets idemkit.ErrPayloadMismatch, never the first transfer's answer, and no
// try runs for it. The initiator examples (README, docs/DTM.md, ExampleGlobal_Run) logged this error
// as "no outcome yet, retry with the same key", which gets the same mismatch for ever.
func TestGlobalKeyReusedForAnotherPayload(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	c := newCall()
	c.Fingerprint = "amount=30"
	other := c
	other.Fingerprint = "amount=40"
	noTries := k.runParams(other)
	noTries.Tries = func(*dtmcli.Tcc) error { t.Error("the tries ran for a mismatching payload"); return nil }

	first := k.runParams(c)
	tries := first.Tries
	first.Tries = func(tc *dtmcli.Tcc) error {
		// The first transfer is running: its tries are being called.
		if _, err := k.global.Run(ctxb, noTries); !errors.Is(err, idemkit.ErrPayloadMismatch) {
			t.Errorf("another payload while the key runs: %v, want ErrPayloadMismatch", err)
		}
		return tries(tc)
	}
	out, err := k.global.Run(ctxb, first)
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("Run = %+v, %v", out, err)
	}
	if dup, err := k.global.Run(ctxb, noTries); !errors.Is(err, idemkit.ErrPayloadMismatch) || dup.Replayed {
		t.Fatalf("another payload once the key finished: %+v, %v; want ErrPayloadMismatch", dup, err)
	}
	k.checkBalances(t, amount)
}
