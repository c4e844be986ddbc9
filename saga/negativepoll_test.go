package saga_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestNegativePollIntervalStartsNothing: an Initiator whose Status has a negative PollInterval (an
// invalid client: txstatus's Wait refuses it) claimed the key and submitted the saga, and only then,
// waiting for its outcome, failed with the client's error: the saga ran, its record was left to the
// Reconciler, and the caller got an error for every request. The invalid client is refused before
// anything is claimed or submitted.
func TestNegativePollIntervalStartsNothing(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	init := *k.init
	init.Status = &txstatus.Client{Server: k.srv.URL(), PollInterval: -time.Second}
	c := newCall()
	out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps})
	if err == nil || out.GID != "" {
		t.Fatalf("Submit = %+v, %v: want an error and nothing started", out, err)
	}
	if _, gerr := k.guard.Get(ctxb, c.Scope, c.Key); !errors.Is(gerr, idemkit.ErrNotFound) {
		t.Fatalf("the key was claimed (%v): Submit = %+v, %v", gerr, out, err)
	}
	k.checkBalances(t, 0)
}
