package tcc_test

import (
	"testing"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/txstatus"
)

// TestGlobalServerWithTrailingSlash: Global.Server given with a trailing slash
// ("http://dtm:36789/api/dtmsvr/") works as without one. The prepare, submit and queries (txstatus)
// took it so, but the tries register their branches through dtmcli, which posted to
// ".../api/dtmsvr//registerBranch": DTM answered 404, every try failed and every transaction was
// aborted.
func TestGlobalServerWithTrailingSlash(t *testing.T) {
	t.Parallel()
	k := newBank(t)
	g := *k.global
	g.Server += "/"
	c := newCall()
	out, err := g.Run(ctxb, k.runParams(c))
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("Run with Server %q = %+v, %v", g.Server, out, err)
	}
	if tr := waitTrans(t, k.srv, out.GID); tr.Status != dtmcli.StatusSucceed {
		t.Fatalf("TCC %s", tr.Status)
	}
	k.checkBalances(t, amount)
	if rec := k.record(t, c); rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("record %s", rec.Status)
	}
}
