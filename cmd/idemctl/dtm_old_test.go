package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/dtmserver"
)

// TestDTMOfAnOldClaimDTMDoesNotKnow: a claim of a gid DTM has no record of, claimed longer ago than
// the reconcilers' FenceWithin (hooks.DefaultFenceWithin), is not fenced or failed by them: DTM may
// have forgotten a transaction that ran, so they report it and leave it PROCESSING for an operator
// (hooks' TestReconcilerDoesNotFenceAnOldClaim), and its key answers in flight until one releases it.
// idemctl dtm told that operator the reconciler would settle it as failed once its lease ran out:
// the key stayed stuck while the operator waited for a reconciler that never acts.
func TestDTMOfAnOldClaimDTMDoesNotKnow(t *testing.T) {
	srv := dtmserver.StartT(t)
	ctx := context.Background()
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			f := setup(t, d)
			f.env["IDEMCTL_DTM"] = srv.URL()
			young, old := "gid-young-"+d, "gid-old-"+d
			for _, gid := range []string{old, young} {
				cl, _, err := f.guard.Begin(ctx, idemkit.Call{Scope: scopeA, Key: "k-" + gid, GID: gid})
				if err != nil || cl == nil {
					t.Fatalf("Begin %s: %v", gid, err)
				}
				cl.Detach(ctx)
				if gid == old {
					f.clock.Advance(hooks.DefaultFenceWithin + time.Hour)
				}
			}
			f.clock.Advance(2 * testLease)
			r := f.want(t, exitOK, nil, []string{"dtm", old}, "unknown to DTM")
			if strings.Contains(r.stdout, "reconciler settles") || !strings.Contains(r.stdout, "FenceWithin") ||
				!strings.Contains(r.stdout, "release --force") {
				t.Errorf("dtm of a claim older than FenceWithin: %s\nwant it to say the reconciler leaves it PROCESSING for an operator (release --force), not that it settles it", r)
			}
			r = f.want(t, exitOK, nil, []string{"dtm", young}, "unknown to DTM")
			if !strings.Contains(r.stdout, "reconciler settles") {
				t.Errorf("dtm of a claim within FenceWithin: %s\nwant the reconciler's settlement", r)
			}
		})
	}
}
