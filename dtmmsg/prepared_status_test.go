package dtmmsg_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// submitDropped fails every submit as a connection DTM refused would, and passes every other call.
type submitDropped struct{ rt http.RoundTripper }

func (d submitDropped) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/submit") {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	}
	return d.rt.RoundTrip(r)
}

// TestCommittedButUnsubmittedIsSubmitted: Publish's Outcome.Status is "Succeed, Failed, or Submitted
// when the outcome was not known in time", and with Wait 0 a committed message whose submit failed
// (DTM restarting) is Submitted: DTM's back-check will publish it. With a Wait, Publish reported what
// DTM held at its end, Prepared — a status it does not document, which a caller telling Succeed,
// Failed and Submitted apart took for a failure, though the local transaction committed and the
// message will be published.
func TestCommittedButUnsubmittedIsSubmitted(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 2*time.Second)
	pub.Status = &txstatus.Client{Server: e.dtm.URL(), HTTP: &http.Client{Transport: submitDropped{http.DefaultTransport}, Timeout: 5 * time.Second}}
	out, err := pub.Publish(ctxb, dtmmsg.PublishParams{
		Call: idemkit.Call{Scope: chaosdtmmsg.Scope, Key: "ps1"},
		Steps: func(m *dtmcli.Msg) {
			m.Add(e.svc+"/inbox", chaosdtmmsg.Order{Key: "ps1", Amount: 1})
			m.TimeoutToFail = 30 // DTM's back-check comes after Publish's Wait
		},
		Local: func(ctx context.Context, tx *gorm.DB, gid string) error {
			return tx.Exec("INSERT INTO "+e.w.Tables.Orders+" (gid, idem_key, amount) VALUES (?, 'ps1', 1)", gid).Error
		},
		Result: []byte(`{"order":"ps1"}`),
	})
	if err != nil || out.Status != txstatus.Submitted || string(out.Result) != `{"order":"ps1"}` {
		t.Fatalf("Publish of a committed message whose submit failed = %+v, %v; want Status Submitted (DTM's back-check publishes it) with the result", out, err)
	}
}
