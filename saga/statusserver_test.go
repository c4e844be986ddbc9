package saga_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestStatusWithoutServerTalksToTheInitiatorsServer: an Initiator whose Status sets only its HTTP
// client or PollInterval (Server left empty, the Initiator's Server set) posted the submit with that
// client, which had no server: every Submit was refused by idemkit before anything was sent, and
// returned an Outcome Failed with a nil error — a saga that rolled back, to the caller — the
// Initiator's Server never used. Status's Server defaults to the Initiator's.
func TestStatusWithoutServerTalksToTheInitiatorsServer(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	status := &txstatus.Client{PollInterval: 50 * time.Millisecond}
	init := &saga.Initiator{Server: k.srv.URL(), Lifecycle: k.lc, Wait: settleTimeout, Status: status}
	c := newCall()
	out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte("ok")})
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("Submit = %s (%v), %v", out.Status, out.Reason, err)
	}
	k.checkBalances(t, amount)
	if rec := k.record(t, c); rec.Status != idemkit.StatusSucceeded || string(rec.Response) != "ok" {
		t.Fatalf("record %s %q", rec.Status, rec.Response)
	}
	if status.Server != "" {
		t.Fatalf("Submit changed the caller's Status: Server %q", status.Server)
	}
}
