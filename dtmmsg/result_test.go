package dtmmsg_test

import (
	"context"
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

// TestPublishFirstCallResult: Outcome.Result is, on a first call, the bytes every replay returns
// (hooks.Outcome); Publish left it nil on the first call of a message that succeeded (found by a
// defect hunt).
func TestPublishFirstCallResult(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 20*time.Second)
	out, err := e.w.PublishOrder(ctxb, pub, e.svc, "q1", 3, nil)
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("publish: %+v %v", out, err)
	}
	dup, err := e.w.PublishOrder(ctxb, pub, e.svc, "q1", 3, nil)
	if err != nil || !dup.Replayed {
		t.Fatalf("replay: %+v %v", dup, err)
	}
	if len(out.Result) == 0 || string(out.Result) != string(dup.Result) {
		t.Errorf("first call's Result %q, replay's %q", out.Result, dup.Result)
	}
}

// TestCallResultIsStoredWithTheClaim: idemkit.Call.Result, "when set, is stored with the claim and
// becomes the record's result", and saga.Initiator, tcc.Global and hooks.Lifecycle.Run keep it
// (PublishParams.Result only when Call.Result is unset). Publish overwrote it with PublishParams.Result:
// a caller that put the order's id in Call.Result, as for its sagas, got a message published with an
// empty Outcome.Result, and every duplicate of the key was replayed an empty result.
func TestCallResultIsStoredWithTheClaim(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 20*time.Second)
	publish := func() (hooks.Outcome, error) {
		return pub.Publish(ctxb, dtmmsg.PublishParams{
			Call: idemkit.Call{Scope: chaosdtmmsg.Scope, Key: "cr1", Result: []byte(`{"order":"cr1"}`)},
			Steps: func(m *dtmcli.Msg) {
				m.Add(e.svc+"/inbox", chaosdtmmsg.Order{Key: "cr1", Amount: 1})
			},
			Local: func(ctx context.Context, tx *gorm.DB, gid string) error {
				return tx.Exec("INSERT INTO "+e.w.Tables.Orders+" (gid, idem_key, amount) VALUES (?, 'cr1', 1)", gid).Error
			},
		})
	}
	out, err := publish()
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("publish: %+v %v", out, err)
	}
	dup, err := publish()
	if err != nil || !dup.Replayed {
		t.Fatalf("replay: %+v %v", dup, err)
	}
	if string(out.Result) != `{"order":"cr1"}` || string(dup.Result) != `{"order":"cr1"}` {
		t.Fatalf("first call's Result %q, replay's %q; want Call.Result, stored with the claim, for both", out.Result, dup.Result)
	}
}
