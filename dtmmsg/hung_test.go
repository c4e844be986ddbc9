package dtmmsg_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// TestUnansweredSubmitOrAbortIsBounded: DTM takes the prepare, then accepts the submit (after the local
// commit) or the abort (after a local failure) and never answers. Both went through dtmcli, which takes
// no context and whose default client has no timeout: Publish hung for as long as the connection stayed
// open, after its outcome was decided. They are bounded (Publisher.Wait, or txstatus.DefaultTimeout when
// longer): a committed message's submit left unanswered is published by DTM's back-check, and a
// local failure is answered and recorded as always (found by a defect hunt).
func TestUnansweredSubmitOrAbortIsBounded(t *testing.T) {
	for _, op := range []string{"submit", "abort"} {
		t.Run(op, func(t *testing.T) {
			e := setup(t)
			target, err := url.Parse(e.dtm.URL())
			if err != nil {
				t.Fatal(err)
			}
			fwd := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
			release := make(chan struct{})
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "/"+op) {
					select { // taken, never answered
					case <-release:
					case <-r.Context().Done():
					}
					return
				}
				fwd.ServeHTTP(w, r)
			}))
			t.Cleanup(proxy.Close)
			t.Cleanup(func() { close(release) }) // runs first: the held requests end
			key, amount := "unanswered-"+op, int64(6)
			if op == "abort" {
				amount = -1 // the local transaction fails permanently: Publish aborts the message
			}
			pub := e.w.Publisher(proxy.URL+target.Path, e.svc, 0)
			type result struct {
				out hooks.Outcome
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := e.w.PublishOrder(ctxb, pub, e.svc, key, amount, nil)
				done <- result{out, err}
			}()
			var res result
			select {
			case res = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("Publish still waits 30 s for DTM's answer to the %s", op)
			}
			status := &txstatus.Client{Server: e.dtm.URL()}
			if op == "abort" {
				if !errors.Is(res.err, dtmmsg.ErrLocalFailed) || !errors.Is(res.err, idemkit.ErrRejected) || res.out.Status != txstatus.Failed {
					t.Fatalf("Publish = %+v, %v; want the local failure, rejected", res.out, res.err)
				}
				if rec, err := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, key); err != nil || rec.Status != idemkit.StatusRejected {
					t.Fatalf("record %+v, %v; want REJECTED", rec, err)
				}
				return
			}
			if res.err != nil || res.out.Status != txstatus.Submitted || res.out.Reason == nil {
				t.Fatalf("Publish = %+v, %v; want Submitted, the unanswered submit as its Reason", res.out, res.err)
			}
			// The back-check finds the commit, and DTM publishes.
			wctx, cancel := context.WithTimeout(ctxb, 30*time.Second)
			defer cancel()
			if st, err := status.Wait(wctx, res.out.GID); err != nil || st != txstatus.Succeed {
				t.Fatalf("message %s: %v", st, err)
			}
			if n := e.count(t, e.w.Tables.Inbox, "idem_key = ?", key); n != 1 {
				t.Fatalf("%d messages delivered, want 1", n)
			}
		})
	}
}
