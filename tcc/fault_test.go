package tcc_test

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/txstatus"
)

// TestGatewayErrorsAreNotRefusals (issue 11, item 11): a gateway in front of DTM answers the TCC's
// prepare or submit with a 5xx or a reset. None of these is DTM's refusal: a prepare that never
// reached DTM leaves the record PROCESSING (a retry is in flight), and the reconciler fences the gid
// and rolls the record back before the retry runs the only transaction; a submit DTM got although the
// initiator heard a 502 completes normally. Either way the money moves once.
func TestGatewayErrorsAreNotRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		op     string
		action dtmserver.ProxyAction
	}{
		{"prepare-503-dropped", "prepare", dtmserver.ProxyAction{Drop: true, Status: 503}},
		{"prepare-502-dropped", "prepare", dtmserver.ProxyAction{Drop: true, Status: 502}},
		{"prepare-reset-dropped", "prepare", dtmserver.ProxyAction{Drop: true, Reset: true}},
		{"submit-502-forwarded", "submit", dtmserver.ProxyAction{Status: 502}},
		{"submit-reset-forwarded", "submit", dtmserver.ProxyAction{Reset: true}},
		{"submit-504-late", "submit", dtmserver.ProxyAction{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := newBank(t)
			later := make(chan struct{})
			if tc.name == "submit-504-late" {
				tc.action = dtmserver.ProxyAction{Later: later}
				time.AfterFunc(500*time.Millisecond, func() { close(later) }) // after the initiator heard the 504
			}
			var used atomic.Bool
			p := dtmserver.NewProxy(t, k.srv, func(r *http.Request) dtmserver.ProxyAction {
				if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/"+tc.op) && used.CompareAndSwap(false, true) {
					return tc.action
				}
				return dtmserver.ProxyAction{}
			})
			g := *k.global
			g.Server = p.URL()
			g.Status = &txstatus.Client{Server: p.URL(), PollInterval: 50 * time.Millisecond}
			c := newCall()
			out, err := g.Run(ctxb, k.runParams(c))
			if tc.op == "prepare" {
				if err == nil || !errors.Is(err, txstatus.ErrNoAnswer) || out.GID == "" {
					t.Fatalf("Run = %+v, %v; want an unknown outcome", out, err)
				}
				if rec := k.record(t, c); rec.Status != idemkit.StatusProcessing {
					t.Fatalf("record %s; want PROCESSING for the reconciler", rec.Status)
				}
				if _, err := k.global.Run(ctxb, k.runParams(c)); !errors.Is(err, idemkit.ErrInFlight) {
					t.Fatalf("retry while the outcome is unknown: %v", err)
				}
				rc := &hooks.Reconciler{Lifecycle: k.global.Lifecycle, Scopes: []string{c.Scope}, Manager: &txstatus.Client{Server: k.srv.URL()}}
				if n, err := rc.RunOnce(ctxb, time.Now().Add(time.Hour), 10); n != 1 || err != nil {
					t.Fatalf("reconciler: %d, %v", n, err)
				}
				if rec := k.record(t, c); rec.Status != idemkit.StatusFailed {
					t.Fatalf("record %s after the reconciler", rec.Status)
				}
				again, err := k.global.Run(ctxb, k.runParams(c))
				if err != nil || again.Status != txstatus.Succeed || again.GID == out.GID {
					t.Fatalf("retry = %+v, %v", again, err)
				}
			} else if err != nil || out.Status != txstatus.Succeed {
				t.Fatalf("Run = %+v, %v", out, err)
			}
			k.checkBalances(t, amount)
			if k.tryCount() != 1 {
				t.Fatalf("the try ran %d times", k.tryCount())
			}
		})
	}
}
