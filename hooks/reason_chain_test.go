package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

var errInsufficient = errors.New("insufficient funds")

// TestTryErrorKeptWhenAbortAnswerLost: a TCC try fails (a retryable error of the business),
// the initiator aborts with it as the rollback reason, and the abort's answer is lost (a gateway's
// 502 after DTM took it). A Start that then returns "<try error> (and aborting: ...)" as a plain
// wrapped error (tcc's start did before it returned a *hooks.AbortError; a hand-written Start still
// may), whose text is not DTM's rollback reason (the try error's text): rollbackReason takes DTM's
// string, and the
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

// TestLostAbortRollsBackForItsReason: a TCC try failed and the abort that gives DTM the try's error as
// the rollback reason was lost (Start returns an *hooks.AbortError); DTM rolled the TCC back at its
// timeout, with its own reason. The record is settled with the try's error, as when the abort got
// through, not with DTM's reason or the lost abort's error: REJECTED for a permanent one (marked
// idemkit.Permanent), FAILED for another (marked idemkit.Retryable with the abort's error, as
// tcc.Global returns it).
func TestLostAbortRollsBackForItsReason(t *testing.T) {
	abortErr := errors.New("tcc: aborting g: txstatus: outcome unknown: HTTP 503")
	for _, tc := range []struct {
		name  string
		start error
		want  idemkit.Status
	}{
		{"permanent", &hooks.AbortError{Reason: idemkit.Permanent(errInsufficient), Err: abortErr}, idemkit.StatusRejected},
		{"not permanent", idemkit.Retryable(&hooks.AbortError{Reason: errInsufficient, Err: abortErr}), idemkit.StatusFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			status := dtmAnswering(t, `{"branches":[{"op":"cancel"},{"op":"try"}],"transaction":{"status":"failed","trans_type":"tcc","rollback_reason":"Timeout after 3 seconds"}}`)
			out, err := b.lc.Run(ctxb, hooks.RunParams{TransType: "tcc", Call: call("k"), Status: status, Wait: time.Second,
				Start: func(context.Context, string) error { return tc.start }})
			if out.Status != txstatus.Failed || !errors.Is(out.Reason, errInsufficient) {
				t.Fatalf("Run = %+v, %v; want Failed for the try's error", out, err)
			}
			want := hooks.ErrRolledBack.Error() + ": " + errInsufficient.Error()
			if rec := b.status(t, "k"); rec.Status != tc.want || rec.Error != want {
				t.Fatalf("record %s %q; want %s %q", rec.Status, rec.Error, tc.want, want)
			}
			var rej *idemkit.RejectedError
			switch {
			case tc.want == idemkit.StatusRejected && (!errors.As(err, &rej) || rej.Message != want):
				t.Fatalf("Run's error %v; want the rejection %q", err, want)
			case tc.want == idemkit.StatusFailed && err != nil:
				t.Fatalf("Run's error %v; want none", err)
			}
		})
	}
}
