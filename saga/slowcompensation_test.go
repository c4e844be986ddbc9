package saga_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestSlowCompensationCompletes: a compensation whose business takes longer than DTM's request
// timeout (an external call inside it, say) completes on its first delivery, as with dtmcli's
// barrier: DTM gives up on the call, but the business goes on and commits, and DTM's retry finds it
// done. Cancelled with the request, it was rolled back on every delivery and run again on the next —
// its external effects repeated each time — and the saga never finished rolling back.
func TestSlowCompensationCompletes(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	k.setFrozen(t, transIn, true) // the second step refuses: the first is compensated
	barTable := testsvc.Name("bar_")
	testsvc.DropTable(t, k.db, barTable)
	bar, err := barrier.NewGorm(k.db, &barrier.GormOptions{Table: barTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := bar.CreateTable(ctxb); err != nil {
		t.Fatal(err)
	}
	restore := k.adjust("/SlowOutCompensate", transOut, +1, false)
	mux := http.NewServeMux()
	mux.Handle("/SlowOut", saga.Action(k.steps, dtmhttp.Gorm(bar, k.adjust("/SlowOut", transOut, -1, true))))
	mux.Handle("/SlowOutCompensate", saga.Compensate(k.steps, dtmhttp.Gorm(bar, func(ctx context.Context, tx *gorm.DB, p transfer) error {
		k.mu.Lock()
		k.runs["compensation started"]++
		k.mu.Unlock()
		time.Sleep(1500 * time.Millisecond) // longer than the saga's RequestTimeout (1 s)
		return restore(ctx, tx, p)
	})))
	svc := httptest.NewServer(mux)
	t.Cleanup(svc.Close)

	init := *k.init
	init.Wait = 0
	out, err := init.Submit(ctxb, saga.SubmitParams{Call: newCall(), Steps: func(s *dtmcli.Saga) {
		s.RetryInterval = 1
		s.RequestTimeout = 1
		s.Add(svc.URL+"/SlowOut", svc.URL+"/SlowOutCompensate", &transfer{Amount: amount}).
			Add(k.svc.URL+"/TransIn", k.svc.URL+"/TransInCompensate", &transfer{Amount: amount})
	}})
	if err != nil || out.Status != txstatus.Submitted {
		t.Fatalf("Submit = %+v, %v", out, err)
	}
	if tr := waitTrans(t, k.srv, out.GID); tr.Status != dtmcli.StatusFailed {
		t.Fatalf("saga %s; branch calls %q", tr.Status, k.eventsOf(out.GID))
	}
	if n := k.runsOf("compensation started"); n != 1 {
		t.Fatalf("the slow compensation started %d times, want 1; branch calls %q", n, k.eventsOf(out.GID))
	}
	k.checkBalances(t, 0)
}
