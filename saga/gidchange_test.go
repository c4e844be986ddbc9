package saga_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestStepsMustNotChangeTheGID: Steps receives the dtmcli saga and could set its Gid (or TransType);
// the saga was then submitted under a gid other than the record's (or as another kind of transaction),
// which no wait, query or Reconciler fence of the record's gid followed: the record was settled FAILED
// (or left to a Reconciler that fenced the record's gid) while the saga ran and succeeded, and a retry
// with the key moved the money a second time. Submit now refuses such a saga before anything is sent:
// the record is rolled back, the key free again, and the error says Steps must not change it (found by
// a defect hunt).
func TestStepsMustNotChangeTheGID(t *testing.T) {
	for _, field := range []string{"Gid", "TransType"} {
		t.Run(field, func(t *testing.T) {
			k := newBank(t, nil)
			init := *k.init
			init.Wait = 3 * time.Second // the record's gid, which nothing holds, is waited for before the fix
			c := newCall()
			other := txstatus.NewGID()
			out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: func(s *dtmcli.Saga) {
				k.addSteps(s)
				switch field {
				case "Gid":
					s.Gid = other
				case "TransType":
					s.TransType = "msg"
				}
			}})
			t.Logf("Submit = %+v, %v", out, err)
			for _, gid := range []string{out.GID, other} {
				if tr, qerr := k.srv.Query(ctxb, gid); qerr != nil {
					t.Fatal(qerr)
				} else if tr.Status != "" {
					waitTrans(t, k.srv, gid)
					t.Errorf("DTM holds %s %s (%s) although Steps changed the saga's %s: want nothing submitted", tr.TransType, gid, tr.Status, field)
				}
			}
			rec := k.record(t, c)
			if err == nil || !strings.Contains(err.Error(), "must not change") || !errors.Is(err, txstatus.ErrRefused) ||
				out.Status != txstatus.Failed || !errors.Is(out.Reason, txstatus.ErrRefused) {
				t.Errorf("Submit = %+v, %v; want Failed and an error saying Steps must not change the saga's %s, matching txstatus.ErrRefused", out, err, field)
			}
			if rec.Status != idemkit.StatusFailed || rec.GID != out.GID {
				t.Errorf("record %s (gid %q, Submit's %q): want FAILED, the key free again", rec.Status, rec.GID, out.GID)
			}
			if out, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps}); err != nil || out.Status != txstatus.Succeed {
				t.Fatalf("retry: %+v, %v", out, err)
			}
			k.checkBalances(t, amount)
		})
	}
}
