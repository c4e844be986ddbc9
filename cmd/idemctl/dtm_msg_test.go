package main

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/internal/dtmserver"
)

// TestMsgGIDPrefix: idemctl's copy of dtmmsg.GIDPrefix.
func TestMsgGIDPrefix(t *testing.T) {
	if msgGIDPrefix != dtmmsg.GIDPrefix {
		t.Fatalf("msgGIDPrefix %q, dtmmsg.GIDPrefix %q", msgGIDPrefix, dtmmsg.GIDPrefix)
	}
}

// TestDTMOfAMessageDTMDoesNotKnow: a 2-phase message's record whose gid DTM has no record of is
// settled by dtmmsg.Reconciler's back-check: FAILED when its local transaction never committed, left
// PROCESSING for an operator when it did (DTM lost a message it had prepared: delivered or not, nobody
// can tell). idemctl dtm said it was never submitted and that the reconciler would settle it as failed.
func TestDTMOfAMessageDTMDoesNotKnow(t *testing.T) {
	srv := dtmserver.StartT(t)
	ctx := context.Background()
	f := setup(t, "mysql")
	f.env["IDEMCTL_DTM"] = srv.URL()
	gid := dtmmsg.GIDPrefix + "lost-" + f.table
	cl, _, err := f.guard.Begin(ctx, idemkit.Call{Scope: scopeA, Key: "k-msg", GID: gid})
	if err != nil || cl == nil {
		t.Fatalf("Begin: %v", err)
	}
	cl.Detach(ctx)
	f.clock.Advance(2 * testLease)
	r := f.want(t, exitOK, nil, []string{"dtm", gid}, "unknown to DTM")
	if strings.Contains(r.stdout, "it was never submitted") || !strings.Contains(r.stdout, "back-check") {
		t.Errorf("dtm of a message DTM does not know: %s\nwant the back-check's two outcomes, not a transaction never submitted", r)
	}
}
