package dtmmsg_test

import (
	"context"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// TestPanickingLocalFreesTheKey: a local transaction (or Steps: dtmcli's Add panics on a payload it
// cannot marshal) that panics rolls back (nothing committed,
// nothing can be published), yet Publish let the panic go without settling anything: the message
// stayed prepared at DTM until its back-check, and the record PROCESSING with its gid, so every retry
// of the key got idemkit.ErrInFlight until a Reconciler settled it. A panic is settled as a retryable
// failure of Local (fenced, aborted, the record FAILED), then goes on.
func TestPanickingLocalFreesTheKey(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	var gid string
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v, want the panic to go on", r)
			}
		}()
		_, _ = e.w.PublishOrder(ctxb, pub, e.svc, "pan", 5, func() { panic("kaboom") })
	}()
	if n := e.count(t, e.w.Tables.Orders, "idem_key = ?", "pan"); n != 0 {
		t.Fatalf("%d orders committed by a local transaction that panicked", n)
	}
	rec, err := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "pan")
	if err == nil {
		gid = rec.GID
		t.Logf("record after the panic: %s gid %s", rec.Status, gid)
	}
	out, err := e.w.PublishOrder(ctxb, pub, e.svc, "pan", 5, nil)
	if err != nil || out.Status != txstatus.Submitted {
		t.Fatalf("retry of the key after a panicking local transaction: %+v %v", out, err)
	}
	if gid != "" {
		status := &txstatus.Client{Server: e.dtm.URL()}
		ctx, cancel := context.WithTimeout(ctxb, 5*time.Second)
		defer cancel()
		if st, err := status.Status(ctx, gid); err != nil || st != txstatus.Failed {
			t.Errorf("the panicked message %s is %s (%v) at DTM, want failed (aborted)", gid, st, err)
		}
	}
}

func TestPanickingStepsFreeTheKey(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	call := idemkit.Call{Scope: chaosdtmmsg.Scope, Key: "pan-steps"}
	local := func(context.Context, *gorm.DB, string) error { return nil }
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Fatal("Steps' panic did not go on")
			}
		}()
		_, _ = pub.Publish(ctxb, dtmmsg.PublishParams{Call: call, Local: local, Steps: func(m *dtmcli.Msg) {
			m.Add(e.svc+"/inbox", make(chan int)) // dtmcli panics: it cannot marshal a channel
		}})
	}()
	out, err := pub.Publish(ctxb, dtmmsg.PublishParams{Call: call, Local: local, Steps: func(m *dtmcli.Msg) {
		m.Add(e.svc+"/inbox", chaosdtmmsg.Order{Key: "pan-steps", Amount: 1})
	}})
	if err != nil || out.Status != txstatus.Submitted {
		t.Fatalf("retry of the key after Steps panicked: %+v %v", out, err)
	}
}
