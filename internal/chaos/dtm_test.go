//go:build unix

package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestChaosDTM is the CI configuration of the DTM scenario (issue 11, item 1 and the initiator-kill
// fault): the example's order service under duplicate storms of saga and TCC orders, SIGKILLed every
// ~4s and restarted on its data — with an external DTM server on a private MariaDB and Redis, and on
// the embedded defaults with the DTM child process restarted on the data directory. Every key must end
// answered 201 with one order, money and stock conserved, no compensation missing, 0 violations.
func TestChaosDTM(t *testing.T) {
	bctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := dtmserver.Build(bctx, nil); err != nil {
		testsvc.Unavailable(t, "DTM server", err)
	}
	bin, err := buildExample(bctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []DTMMode{DTMExternal, DTMEmbedded} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			if mode == DTMExternal {
				requireServers(t, MariaDB)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			rep, err := RunDTM(ctx, &DTMConfig{Mode: mode, ServiceBinary: bin, Duration: 20 * time.Second, MinKills: 2, KillEvery: 4 * time.Second, Clients: 5, Logf: t.Logf})
			if err != nil {
				t.Fatalf("the harness could not run: %v", err)
			}
			t.Log("\n" + rep.Summary(10))
			if v := rep.Violations(); len(v) > 0 {
				t.Fatalf("%d violations (see the summary above)", len(v))
			}
			if rep.Kills < 2 || rep.CutRequests == 0 || rep.Check.Paid == 0 || rep.Check.Failed == 0 || rep.Duplicates == 0 {
				t.Errorf("the run was too gentle: %d kills, %d cut requests, %d paid, %d failed orders, %d duplicates",
					rep.Kills, rep.CutRequests, rep.Check.Paid, rep.Check.Failed, rep.Duplicates)
			}
		})
	}
}
