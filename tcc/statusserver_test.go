package tcc_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/tcc"
	"github.com/idemkit/idemkit/txstatus"
)

// TestStatusWithoutServerTalksToTheGlobalsServer: a Global whose Status sets only its HTTP client or
// PollInterval (Server left empty, the Global's Server set) prepared every TCC through that client,
// which had no server: idemkit refused the prepare before sending anything, and Run returned an
// Outcome Failed with a nil error — a TCC that rolled back, to the caller. Status's Server defaults
// to the Global's.
func TestStatusWithoutServerTalksToTheGlobalsServer(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	status := &txstatus.Client{PollInterval: 50 * time.Millisecond}
	g := &tcc.Global{Server: k.global.Server, Lifecycle: k.global.Lifecycle, Wait: settleTimeout, Status: status}
	c := newCall()
	out, err := g.Run(ctxb, k.runParams(c))
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("Run = %s (%v), %v", out.Status, out.Reason, err)
	}
	k.checkBalances(t, amount)
	if rec := k.record(t, c); rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("record %s", rec.Status)
	}
	if status.Server != "" {
		t.Fatalf("Run changed the caller's Status: Server %q", status.Server)
	}
}
