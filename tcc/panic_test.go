package tcc_test

import (
	"testing"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
)

// TestPanickingTriesFreeTheKey: a panic in Tries (after the prepare: the transaction exists, and
// Run aborts it) or in Options (before it: nothing was sent) left the record PROCESSING with its gid,
// the key in flight to every retry until a Reconciler settled it. The record now follows the aborted
// transaction (FAILED), or is rolled back when nothing was sent, before the panic goes on with its
// value (found by a defect hunt).
func TestPanickingTriesFreeTheKey(t *testing.T) {
	for _, where := range []string{"tries", "options"} {
		t.Run(where, func(t *testing.T) {
			k := newBank(t)
			call := newCall()
			p := k.runParams(call)
			switch where {
			case "tries":
				tries := p.Tries
				p.Tries = func(tc *dtmcli.Tcc) error {
					if err := tries(tc); err != nil {
						return err
					}
					panic("boom in the tries")
				}
			case "options":
				p.Options = func(*dtmcli.Tcc) { panic("boom in the options") }
			}
			func() {
				defer func() {
					if v := recover(); v == nil {
						t.Fatal("Run returned; want the panic to go on")
					}
				}()
				_, _ = k.global.Run(ctxb, p)
			}()
			if rec := k.record(t, call); rec.Status != idemkit.StatusFailed {
				t.Fatalf("record after the panic: %s (gid %q), want FAILED: the key free again", rec.Status, rec.GID)
			}
			out, err := k.global.Run(ctxb, k.runParams(call))
			if err != nil || out.Replayed {
				t.Fatalf("retry: %+v %v", out, err)
			}
			k.checkBalances(t, amount)
		})
	}
}
