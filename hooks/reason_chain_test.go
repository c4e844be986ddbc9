package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

var errInsufficient = errors.New("insufficient funds")

// TestTryErrorKeptWhenAbortAnswerLost: a TCC try fails (a retryable error of the business),
// the initiator aborts with it as the rollback reason, and the abort's answer is lost (a gateway's
// 502 after DTM took it). tcc's start then returns "<try error> (and aborting: ...)", whose text is
// not DTM's rollback reason (the try error's text): rollbackReason takes DTM's string, and the
// Outcome's Reason no longer matches the try's error (errors.Is), as it did before and as it does
// when the abort's answer arrived.
func TestTryErrorKeptWhenAbortAnswerLost(t *testing.T) {
	b := setup(t)
	status := dtmAnswering(t, `{"branches":[{"op":"cancel"},{"op":"try"}],"transaction":{"status":"failed","trans_type":"tcc","rollback_reason":"`+errInsufficient.Error()+`"}}`)
	out, err := b.lc.Run(ctxb, hooks.RunParams{TransType: "tcc", Call: call("k"), Status: status, Wait: time.Second,
		Start: func(context.Context, string) error {
			return fmt.Errorf("%w (and aborting: %w)", errInsufficient, errors.New("tcc: aborting g: txstatus: outcome unknown: HTTP 502"))
		}})
	if err != nil || out.Status != txstatus.Failed {
		t.Fatalf("Run = %+v, %v", out, err)
	}
	if !errors.Is(out.Reason, errInsufficient) {
		t.Fatalf("Reason %v: want it to match the try's error", out.Reason)
	}
}

// Control: the abort's answer arrived; start returns the try error itself.
func TestTryErrorKeptWhenAbortAnswered(t *testing.T) {
	b := setup(t)
	status := dtmAnswering(t, `{"branches":[{"op":"cancel"},{"op":"try"}],"transaction":{"status":"failed","trans_type":"tcc","rollback_reason":"`+errInsufficient.Error()+`"}}`)
	out, _ := b.lc.Run(ctxb, hooks.RunParams{TransType: "tcc", Call: call("k"), Status: status, Wait: time.Second,
		Start: func(context.Context, string) error { return errInsufficient }})
	if !errors.Is(out.Reason, errInsufficient) {
		t.Fatalf("Reason %v: want it to match the try's error", out.Reason)
	}
}
