package tcc_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/txstatus"
)

// TestLongTryErrorOnSQLStore: DTM's SQL stores keep the rollback reason in a varchar(1024), and refuse
// an abort whose reason is longer. A try error of more than 1024 characters made Run's abort fail
// there: the TCC stayed prepared until its timeout (its cancels waited), Run reported it Prepared and
// left the record PROCESSING, and a permanent error lost its permanence (DTM's timeout became the
// reason: FAILED, not REJECTED). The reason given to DTM is cut to fit, and Run still reports the
// try's own error.
func TestLongTryErrorOnSQLStore(t *testing.T) {
	k := newBank(t)
	srv := testsvc.DTMOnMySQL(t)
	k.global.Server = srv.URL()
	k.global.Status = &txstatus.Client{Server: srv.URL(), PollInterval: 50 * time.Millisecond}
	k.global.Wait = 10 * time.Second // far below the TCC's timeout: only an abort that DTM took ends it in time

	errLong := errors.New("refused: " + strings.Repeat("é", 1100))
	for _, permanent := range []bool{true, false} {
		c := newCall()
		p := k.runParams(c)
		p.Options = func(tc *dtmcli.Tcc) { tc.RetryInterval, tc.TimeoutToFail = 1, 120 }
		p.Tries = func(tc *dtmcli.Tcc) error {
			if _, err := tc.CallBranch(&transfer{Amount: amount}, k.svc.URL+"/OutTry", k.svc.URL+"/OutConfirm", k.svc.URL+"/OutCancel"); err != nil {
				return err
			}
			if permanent {
				return idemkit.Permanent(fmt.Errorf("wrapped: %w", errLong))
			}
			return fmt.Errorf("wrapped: %w", errLong)
		}
		out, err := k.global.Run(ctxb, p)
		rec := k.record(t, c)
		want := idemkit.StatusFailed
		if permanent {
			want = idemkit.StatusRejected
			if !errors.Is(err, idemkit.ErrRejected) {
				t.Errorf("permanent: Run error %.200v, want a rejection", err)
			}
		} else if err != nil {
			t.Errorf("Run error %.200v", err)
		}
		if out.Status != txstatus.Failed || rec.Status != want || !errors.Is(out.Reason, errLong) {
			t.Fatalf("permanent %v: Run = %s (reason %.100v), record %s; want failed, the try's error, record %s",
				permanent, out.Status, out.Reason, rec.Status, want)
		}
		if tr := waitTrans(t, srv, out.GID); tr.Status != dtmcli.StatusFailed {
			t.Fatalf("TCC %s", tr.Status)
		}
		k.checkBalances(t, 0) // the tried amount was released by the cancel
	}
}
