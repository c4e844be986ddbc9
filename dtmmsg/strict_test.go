package dtmmsg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// TestPublisherErrorsStayRetryableUnderAStrictClassifier: a message DTM could not be asked to prepare,
// and a local transaction the barrier refused (the back-check had already decided the message failed),
// are no failure of the business: nothing was published and the key may publish anew. Under an
// Options.IsPermanent calling every unknown error permanent they were recorded REJECTED, and every retry
// of the key got the replayed rejection.
func TestPublisherErrorsStayRetryableUnderAStrictClassifier(t *testing.T) {
	e := setup(t)
	errTransient := errors.New("transient")
	guard, err := idemkit.New(e.w.Store, &idemkit.Options{Lease: 2 * time.Second, IsPermanent: func(err error) bool { return !errors.Is(err, errTransient) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		server string
		steps  func(m *dtmcli.Msg)
	}{
		{"DTM unreachable at the prepare", "http://127.0.0.1:1/api/dtmsvr", nil},
		{"back-check decided first", e.dtm.URL(), func(m *dtmcli.Msg) {
			// The back-check's answer for the gid, as DTM would ask once the prepare timed out.
			if err := e.w.Barrier.QueryPrepared(ctxb, m.Gid); err == nil {
				t.Error("back-check of a message whose local transaction never ran: committed")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub := e.w.Publisher(tc.server, e.svc, 0)
			pub.Lifecycle = &hooks.Lifecycle{Guard: guard}
			c := idemkit.Call{Scope: chaosdtmmsg.Scope, Key: "strict-" + tc.name}
			out, err := pub.Publish(ctxb, dtmmsgParams(c, e.svc, tc.steps))
			if out.Status != txstatus.Failed || errors.Is(err, idemkit.ErrRejected) {
				t.Fatalf("Publish = %+v, %v: want Failed, not rejected", out, err)
			}
			rec, gerr := guard.Get(ctxb, c.Scope, c.Key)
			if gerr != nil || rec.Status != idemkit.StatusFailed {
				t.Fatalf("record %+v, %v: want FAILED", rec, gerr)
			}
		})
	}
}

func dtmmsgParams(c idemkit.Call, svc string, steps func(m *dtmcli.Msg)) dtmmsg.PublishParams {
	return dtmmsg.PublishParams{
		Call: c,
		Steps: func(m *dtmcli.Msg) {
			m.Add(svc+"/inbox", chaosdtmmsg.Order{Key: c.Key, Amount: 1})
			if steps != nil {
				steps(m)
			}
		},
		Local:  func(context.Context, *gorm.DB, string) error { return nil },
		Result: []byte(`{}`),
	}
}
