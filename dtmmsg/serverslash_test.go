package dtmmsg_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit/txstatus"
)

// TestPublisherServerWithTrailingSlash: a Publisher.Server given with a trailing slash
// ("http://dtm:36789/api/dtmsvr/") works as without one, as tcc.Global's and txstatus's do.
func TestPublisherServerWithTrailingSlash(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL()+"/", e.svc, 20*time.Second)
	out, err := e.w.PublishOrder(ctxb, pub, e.svc, "slash", 3, nil)
	if err != nil || out.Status != txstatus.Succeed {
		t.Fatalf("publish with Server %q: %+v %v", e.dtm.URL()+"/", out, err)
	}
}
