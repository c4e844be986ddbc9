package tcc_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/txstatus"
)

// TestCallbacksMustNotChangeTheGID: Options and Tries receive the dtmcli TCC and could set its Gid
// (or TransType); the transaction was then prepared, tried or submitted under a gid other than the
// record's (or as another kind of transaction), which no wait, query or Reconciler fence of the
// record's gid followed: the record was left to a Reconciler that settles it FAILED while the other
// transaction ran, and a retry with the key could run the business a second time. Run now refuses a
// change made by Options before anything is sent (the record rolled back, the key free again), and
// aborts the record's transaction when Tries made one (the record follows it, FAILED); either way the
// error says the callback must not change the gid (found by a defect hunt).
func TestCallbacksMustNotChangeTheGID(t *testing.T) {
	for _, tc := range []struct{ name, where, field string }{
		{"OptionsGid", "options", "Gid"},
		{"OptionsTransType", "options", "TransType"},
		{"TriesGid", "tries", "Gid"},
		{"TriesGidFirst", "tries first", "Gid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newBank(t)
			g := *k.global
			g.Wait = 3 * time.Second // the record's gid is waited for before the fix
			c := newCall()
			other := txstatus.NewGID()
			change := func(tc2 *dtmcli.Tcc) {
				switch tc.field {
				case "Gid":
					tc2.Gid = other
				case "TransType":
					tc2.TransType = "saga"
				}
			}
			p := k.runParams(c)
			switch tc.where {
			case "options":
				options := p.Options
				p.Options = func(t *dtmcli.Tcc) { options(t); change(t) }
			case "tries first":
				tries := p.Tries
				p.Tries = func(t *dtmcli.Tcc) error {
					change(t)
					return tries(t)
				}
			case "tries":
				tries := p.Tries
				p.Tries = func(t *dtmcli.Tcc) error {
					err := tries(t)
					change(t)
					return err
				}
			}
			out, err := g.Run(ctxb, p)
			t.Logf("Run = %+v, %v", out, err)
			if tr, qerr := k.srv.Query(ctxb, other); qerr != nil {
				t.Fatal(qerr)
			} else if tr.Status != "" {
				t.Errorf("DTM holds %s %s (%s, %d branches) although %s changed the gid: want nothing sent under it", tr.TransType, other, tr.Status, len(tr.Branches), tc.where)
			}
			if err == nil || !strings.Contains(err.Error(), "must not change") || out.Status != txstatus.Failed {
				t.Errorf("Run = %+v, %v; want Failed and an error saying %s must not change the TCC's %s", out, err, tc.where, tc.field)
			}
			if rec := k.record(t, c); rec.Status != idemkit.StatusFailed || rec.GID != out.GID {
				t.Errorf("record %s (gid %q, Run's %q): want FAILED, the key free again", rec.Status, rec.GID, out.GID)
			}
			if strings.HasPrefix(tc.where, "tries") {
				// The record's transaction was aborted: its tries cancelled.
				if tr := waitTrans(t, k.srv, out.GID); tr.Status != dtmcli.StatusFailed {
					t.Errorf("the record's transaction %s: %s, want failed (aborted)", out.GID, tr.Status)
				}
			}
			if out, err := k.global.Run(ctxb, k.runParams(c)); err != nil || out.Status != txstatus.Succeed {
				t.Fatalf("retry: %+v, %v", out, err)
			}
			k.checkBalances(t, amount)
		})
	}
}
