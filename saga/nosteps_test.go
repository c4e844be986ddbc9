package saga_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestSagaWithoutStepsIsRefusedByIdemkit: a saga whose Steps add no step is refused by the Initiator
// before anything is sent, but its reason (the outcome's, the record's error) read "txstatus: DTM
// refused submit of …", sending an operator to DTM's logs for a call DTM never saw. It says idemkit
// refused it now, and still matches txstatus.ErrRefused (nothing started).
func TestSagaWithoutStepsIsRefusedByIdemkit(t *testing.T) {
	k := newBank(t, nil)
	c := newCall()
	out, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: func(*dtmcli.Saga) {}})
	if err != nil || out.Status != txstatus.Failed || !errors.Is(out.Reason, txstatus.ErrRefused) {
		t.Fatalf("empty saga = %+v, %v; want Failed, a reason matching txstatus.ErrRefused", out, err)
	}
	var ref *txstatus.RefusedError
	if !errors.As(out.Reason, &ref) || !ref.Local {
		t.Fatalf("reason %v: want a *txstatus.RefusedError with Local set", out.Reason)
	}
	for what, text := range map[string]string{"reason": out.Reason.Error(), "record's error": k.record(t, c).Error} {
		if strings.Contains(text, "DTM refused") || !strings.Contains(text, "idemkit refused submit") || !strings.Contains(text, "without steps") {
			t.Errorf("%s %q: want it to say idemkit refused the saga without steps, not DTM", what, text)
		}
	}
}
