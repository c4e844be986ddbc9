package tcc_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/txstatus"
)

// TestSubmitNotSentIsPostedAgain: both tries reserved, and the submit could not be sent (DTM
// restarting: the connection refused). The submit was posted once: the TCC stayed prepared, its
// reservations held, until DTM's TimeoutToFail aborted it and cancelled both tries — a transfer whose
// every try succeeded rolled back for a blip. A submit that was not sent is posted again, as an abort
// is: the TCC is confirmed, once. One whose answer was lost (a gateway's 502 for a submit it did
// forward) is still posted once: DTM v1.19 takes a second submit of a TCC it holds as submitted for
// one without branches and marks it succeed at once, whatever became of its confirms.
func TestSubmitNotSentIsPostedAgain(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"not-sent", "answer-lost"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := newBank(t)
			var submits atomic.Int32
			p := dtmserver.NewProxy(t, k.srv, func(r *http.Request) dtmserver.ProxyAction {
				if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/submit") && submits.Add(1) == 1 && name == "answer-lost" {
					return dtmserver.ProxyAction{Status: http.StatusBadGateway} // forwarded, its answer replaced
				}
				return dtmserver.ProxyAction{}
			})
			// A transport that dials afresh for every call and, once armed, finds DTM's port closed.
			var refuse atomic.Bool
			var dialer net.Dialer
			transport := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if refuse.CompareAndSwap(true, false) {
					return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
				}
				return dialer.DialContext(ctx, network, addr)
			}}
			g := *k.global
			g.Server = p.URL()
			g.Status = &txstatus.Client{Server: p.URL(), PollInterval: 50 * time.Millisecond,
				HTTP: &http.Client{Timeout: txstatus.DefaultTimeout, Transport: transport}}
			c := newCall()
			params := k.runParams(c)
			// DTM aborts the TCC soon after a lost submit, rather than after its default 35 s.
			params.Options = func(t *dtmcli.Tcc) { t.RetryInterval, t.TimeoutToFail = 1, 3 }
			tries := params.Tries
			params.Tries = func(tc *dtmcli.Tcc) error {
				err := tries(tc)
				refuse.Store(name == "not-sent") // the submit's connection, next
				return err
			}
			out, err := g.Run(ctxb, params)
			if err != nil || out.Status != txstatus.Succeed {
				t.Fatalf("Run = %+v, %v; want the TCC whose tries all succeeded confirmed", out, err)
			}
			if n := submits.Load(); n != 1 {
				t.Fatalf("DTM got %d submits, want 1", n)
			}
			k.expectEvents(t, out.GID, "01 confirm:200:proceed", "02 confirm:200:proceed")
			k.checkBalances(t, amount)
			if rec := k.record(t, c); rec.Status != idemkit.StatusSucceeded {
				t.Fatalf("record %s %q", rec.Status, rec.Error)
			}
		})
	}
}
