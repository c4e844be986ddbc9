package tcc_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/txstatus"
)

// TestPrepareNeverSentFreesTheKey: DTM is down at the TCC's prepare (the connection refused): nothing
// was sent and nothing started. The record is rolled back, no try runs, Run returns an error matching
// txstatus.ErrNotSent (an outage), and a retry with the key, DTM back, moves the money once. A submit
// that cannot connect after the tries is not taken for that: the transaction exists (prepared, its
// tries reserved), the record stays PROCESSING, and the abort and the reconciler settle it (found by
// a defect hunt).
func TestPrepareNeverSentFreesTheKey(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close() // nothing listens there
	for _, op := range []string{"prepare", "submit"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			k := newBank(t)
			var down atomic.Bool // DTM is down: every new connection is refused
			dial := &net.Dialer{}
			g := *k.global
			g.Status = &txstatus.Client{Server: k.srv.URL(), PollInterval: 50 * time.Millisecond, HTTP: &http.Client{
				Timeout: 5 * time.Second,
				Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					if down.Load() {
						addr = closed
					}
					return dial.DialContext(ctx, network, addr)
				}},
			}}
			c := newCall()
			p := k.runParams(c)
			tries := p.Tries
			p.Tries = func(tc *dtmcli.Tcc) error {
				err := tries(tc)
				down.Store(op == "submit") // down once the tries ran
				return err
			}
			down.Store(op == "prepare")
			out, err := g.Run(ctxb, p)
			down.Store(false)
			rec := k.record(t, c)
			if op == "prepare" {
				if !errors.Is(err, txstatus.ErrNotSent) || out.Status != txstatus.Failed || !errors.Is(out.Reason, hooks.ErrRolledBack) {
					t.Fatalf("Run with DTM down at the prepare = %+v, %v; want Failed (never started) and an error matching ErrNotSent", out, err)
				}
				if rec.Status != idemkit.StatusFailed || k.tryCount() != 0 {
					t.Fatalf("record %s, %d tries; want FAILED (the key free again) and no try", rec.Status, k.tryCount())
				}
				again, err := g.Run(ctxb, k.runParams(c))
				if err != nil || again.Replayed || again.Status != txstatus.Succeed || again.GID == out.GID {
					t.Fatalf("retry with DTM back = %+v, %v; want a new transaction that succeeds", again, err)
				}
				k.checkBalances(t, amount)
				return
			}
			if err == nil || errors.Is(err, txstatus.ErrNotSent) || errors.Is(err, txstatus.ErrRefused) || rec.Status != idemkit.StatusProcessing {
				t.Fatalf("Run with DTM down at the submit after the tries = %+v, %v, record %s; "+
					"want an unknown outcome and the record PROCESSING (the TCC exists)", out, err, rec.Status)
			}
			// The TCC is still prepared, its tries reserved: abort it, and the reconciler follows it.
			abort := map[string]any{"gid": out.GID, "trans_type": "tcc"}
			if err := (&txstatus.Client{Server: k.srv.URL()}).Call(ctxb, "abort", out.GID, abort); err != nil {
				t.Fatal(err)
			}
			waitTrans(t, k.srv, out.GID)
			rc := &hooks.Reconciler{Lifecycle: k.global.Lifecycle, Scopes: []string{c.Scope}, Manager: &txstatus.Client{Server: k.srv.URL()}}
			if n, err := rc.RunOnce(ctxb, time.Now().Add(time.Hour), 10); n != 1 || err != nil {
				t.Fatalf("reconciler: %d, %v", n, err)
			}
			if rec := k.record(t, c); rec.Status != idemkit.StatusFailed {
				t.Fatalf("record %s after the abort and the reconciler", rec.Status)
			}
			k.checkBalances(t, 0)
		})
	}
}
