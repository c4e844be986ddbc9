package tcc_test

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/tcc"
	"github.com/idemkit/idemkit/txstatus"
)

// TestLostAbortKeepsTheRefusal: a try fails (the frozen account's branch refuses it, 409), and the
// abort that carries the try's error to DTM as the rollback reason (marked hooks.PermanentReason for
// a permanent one) does not reach DTM (a gateway answers 503 without forwarding it). The record must
// end as it does when the abort is acknowledged — the same status, the same message — whoever
// settles it:
//   - the initiator, waiting for the outcome while every abort is lost: DTM aborts the TCC at its
//     TimeoutToFail with its own reason ("Timeout after 3 seconds"). A permanent refusal was stored
//     and replayed followed by the lost abort's error ("... (and aborting: ... HTTP 503 ...)"), a
//     retryable one with DTM's reason instead of the try's;
//   - the Reconciler, once the initiator stopped waiting (Wait 0), when DTM was unreachable for a
//     moment only: the abort was posted once, DTM timed the TCC out, and the Reconciler recorded it
//     FAILED with "Timeout after 3 seconds" — a permanent refusal lost, a retry of the key ran a new
//     TCC. The abort is posted again for a while now, and reaches DTM with the reason.
//
// The refusal is permanent the ways the API makes a try's error permanent: Tries marks it
// idemkit.Permanent (as examples/order-pay-inventory does), or the Guard's classifier says so; left
// as it is, it is not permanent, and the record is FAILED (a retry of the key runs anew).
func TestLostAbortKeepsTheRefusal(t *testing.T) {
	t.Parallel()
	for _, kind := range []struct {
		name        string
		want        idemkit.Status
		mark        bool             // Tries marks the branch's refusal idemkit.Permanent
		isPermanent func(error) bool // the Guard's classifier; nil: the default
	}{
		{name: "marked permanent", want: idemkit.StatusRejected, mark: true},
		{name: "classified permanent", want: idemkit.StatusRejected, isPermanent: func(err error) bool { return errors.Is(err, dtmcli.ErrFailure) }},
		{name: "not permanent", want: idemkit.StatusFailed},
	} {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			k := newBank(t)
			if err := k.rdb.HSet(ctxb, k.inKey, "frozen", 1).Err(); err != nil {
				t.Fatal(err)
			}
			base := *k.global
			if kind.isPermanent != nil {
				opts := k.opts
				opts.IsPermanent = kind.isPermanent
				guard, err := idemkit.New(k.store, &opts)
				if err != nil {
					t.Fatal(err)
				}
				base.Lifecycle = &hooks.Lifecycle{Guard: guard}
			}
			// run runs a transfer the frozen account refuses with g, and returns the record once settled
			// (by the initiator, or by a Reconciler when Run left it PROCESSING).
			run := func(t *testing.T, g *tcc.Global) (hooks.Outcome, error, *idemkit.Record) {
				t.Helper()
				c := newCall()
				p := k.runParams(c)
				p.Options = func(tc *dtmcli.Tcc) { tc.RetryInterval, tc.TimeoutToFail = 1, 3 }
				if kind.mark {
					tries := p.Tries
					p.Tries = func(tc *dtmcli.Tcc) error {
						err := tries(tc)
						if errors.Is(err, dtmcli.ErrFailure) {
							return idemkit.Permanent(err)
						}
						return err
					}
				}
				out, err := g.Run(ctxb, p)
				if out.GID == "" {
					t.Fatalf("Run = %+v, %v", out, err)
				}
				if tr := waitTrans(t, k.srv, out.GID); tr.Status != dtmcli.StatusFailed {
					t.Fatalf("TCC %s", tr.Status)
				}
				if rec := k.record(t, c); rec.Status == idemkit.StatusProcessing {
					rc := &hooks.Reconciler{Lifecycle: g.Lifecycle, Scopes: []string{c.Scope}, Manager: &txstatus.Client{Server: k.srv.URL()}, TransType: "tcc"}
					if n, err := rc.RunOnce(ctxb, time.Now().Add(time.Hour), 10); n != 1 || err != nil {
						t.Fatalf("reconciler: %d, %v", n, err)
					}
				}
				return out, err, k.record(t, c)
			}
			// lostAbort returns base, waiting wait, through a gateway that answers aborts 503 without
			// forwarding them, for outage after the first (0: for ever).
			lostAbort := func(t *testing.T, wait, outage time.Duration) *tcc.Global {
				var mu sync.Mutex
				var first time.Time
				p := dtmserver.NewProxy(t, k.srv, func(r *http.Request) dtmserver.ProxyAction {
					if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/abort") {
						return dtmserver.ProxyAction{}
					}
					mu.Lock()
					defer mu.Unlock()
					if first.IsZero() {
						first = time.Now()
					}
					if outage == 0 || time.Since(first) < outage {
						return dtmserver.ProxyAction{Drop: true, Status: 503}
					}
					return dtmserver.ProxyAction{}
				})
				g := base
				g.Server, g.Wait = p.URL(), wait
				g.Status = &txstatus.Client{Server: p.URL(), PollInterval: 50 * time.Millisecond}
				return &g
			}

			_, _, want := run(t, &base) // the abort goes through
			if want.Status != kind.want || !strings.Contains(want.Error, "account frozen") {
				t.Fatalf("record %s %q with the abort acknowledged; want %s with the refusal", want.Status, want.Error, kind.want)
			}
			for _, tc := range []struct {
				name         string
				wait, outage time.Duration
			}{
				{"initiator waits", settleTimeout, 0},
				{"reconciler", 0, time.Second},
			} {
				t.Run(tc.name, func(t *testing.T) {
					out, err, rec := run(t, lostAbort(t, tc.wait, tc.outage))
					t.Logf("Run = %+v, %v", out, err)
					if rec.Status != want.Status || rec.Error != want.Error {
						t.Fatalf("record %s %q; want %s %q, as when the abort is acknowledged", rec.Status, rec.Error, want.Status, want.Error)
					}
					if tc.wait == 0 {
						return
					}
					if !errors.Is(out.Reason, dtmcli.ErrFailure) {
						t.Fatalf("Outcome.Reason %v; want the try's error", out.Reason)
					}
					var rej *idemkit.RejectedError
					switch {
					case want.Status == idemkit.StatusRejected && (!errors.As(err, &rej) || rej.Message != want.Error):
						t.Fatalf("Run's error %v; want the rejection %q", err, want.Error)
					case want.Status == idemkit.StatusFailed && err != nil:
						t.Fatalf("Run's error %v; want none: the transaction rolled back", err)
					}
				})
			}
		})
	}
}
