package dtmmsg_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// TestStatusWithoutServerTalksToThePublishersServer: a Publisher whose Status sets only its HTTP
// client or PollInterval (Server left empty, the Publisher's Server set) prepared every message through
// that client, which had no server: idemkit refused the prepare, nothing was published and the key
// was rolled back, the Publisher's Server never used. Status's Server defaults to the Publisher's.
func TestStatusWithoutServerTalksToThePublishersServer(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 20*time.Second)
	status := &txstatus.Client{PollInterval: 50 * time.Millisecond}
	pub.Status = status
	out, err := e.w.PublishOrder(ctxb, pub, e.svc, "k1", 10, nil)
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("publish: %s (%v), %v", out.Status, out.Reason, err)
	}
	if n := e.count(t, e.w.Tables.Inbox, "gid = ?", out.GID); n != 1 {
		t.Fatalf("branch took effect %d times", n)
	}
	if rec, err := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "k1"); err != nil || rec.Status != idemkit.StatusSucceeded {
		t.Fatalf("record %+v %v", rec, err)
	}
	if status.Server != "" {
		t.Fatalf("Publish changed the caller's Status: Server %q", status.Server)
	}
}
