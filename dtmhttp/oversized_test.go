package dtmhttp_test

// A payload larger than MaxBody fails a saga action (409) and DTM rolls the saga back, calling the
// compensation with the same payload. The action never ran, so the compensation is a null
// compensation the barrier skips without the payload: it must be answered 200, not refused as
// oversized with a 500 that DTM retries forever (the saga stuck aborting).

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/internal/testsvc"
)

type bigTransfer struct {
	Amount int    `json:"amount"`
	Memo   string `json:"memo"`
}

func TestOversizedPayloadNullCompensation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a DTM server")
	}
	srv := dtmserver.StartT(t)
	k := setup(t, nil, &dtmhttp.Options{MaxBody: 256})
	p := &paths{}
	mux := http.NewServeMux()
	route := func(path, op string, run dtmhttp.Business) {
		h := k.b.Handle(op, run)
		mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.note(r, path)
			h.ServeHTTP(w, r)
		}))
	}
	adjust := func(sign int) dtmhttp.GormFunc[bigTransfer] {
		return func(ctx context.Context, tx *gorm.DB, b bigTransfer) error {
			return k.adjust(sign)(ctx, tx, transfer{Amount: b.Amount})
		}
	}
	route("/debit", barrier.OpAction, dtmhttp.Gorm(k.bar, adjust(-1)))
	route("/debitCompensate", barrier.OpCompensate, dtmhttp.Gorm(k.bar, adjust(+1)))
	svc := httptest.NewServer(mux)
	t.Cleanup(svc.Close)

	gid := dtmcli.MustGenGid(srv.URL())
	small := &bigTransfer{Amount: 10}
	big := &bigTransfer{Amount: 20, Memo: strings.Repeat("m", 1000)}
	err := dtmcli.NewSaga(srv.URL(), gid).
		Add(svc.URL+"/debit", svc.URL+"/debitCompensate", small).
		Add(svc.URL+"/debit", svc.URL+"/debitCompensate", big).Submit()
	if err != nil {
		t.Fatal(err)
	}
	tr := settle(t, srv, k, p, gid, "/debitCompensate")
	if tr.Status != dtmcli.StatusFailed {
		t.Fatalf("saga %s, want failed (rolled back)", tr.Status)
	}
	if got := p.statuses(k, "/debitCompensate"); !slices.Equal(got, []int{http.StatusOK, http.StatusOK}) {
		t.Fatalf("/debitCompensate answered %v, want 200, 200", got)
	}
	if bal := k.balance(t); bal != initBalance {
		t.Fatalf("balance %d after the rollback, want %d", bal, initBalance)
	}
}

// TestOversizedPayloadMustNotFailOps: by hand, the oversized payload of an op that must not fail is
// refused (500, retried) only when the barrier lets the call through, and a Business written by hand
// never runs on it.
func TestOversizedPayloadMustNotFailOps(t *testing.T) {
	k := setup(t, nil, &dtmhttp.Options{MaxBody: 64})
	try := k.b.Handle(barrier.OpTry, dtmhttp.Gorm(k.bar, k.adjust(-1)))
	cancel := k.b.Handle(barrier.OpCancel, dtmhttp.Gorm(k.bar, k.adjust(+1)))
	confirm := k.b.Handle(barrier.OpConfirm, dtmhttp.Gorm(k.bar, k.adjust(0)))
	handRan := false
	hand := k.b.Handle(barrier.OpCancel, func(ctx context.Context, req *dtmhttp.Request) (barrier.Outcome, error) {
		var out barrier.Outcome
		err := k.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var err error
			out, err = k.bar.CallOutcome(ctx, tx, req.Branch, func(tx *gorm.DB) error {
				handRan = true
				return nil
			})
			return err
		})
		return out, err
	})
	gid := testsvc.Name("gid-")
	big := `{"amount":1,"pad":"` + strings.Repeat("x", 100) + `"}`
	expect(t, try, call{"tcc", gid, "01", "try", big}, 409, "larger than 64 bytes")
	expect(t, cancel, call{"tcc", gid, "01", "cancel", big}, 200, "SUCCESS")
	expect(t, confirm, call{"tcc", gid, "02", "confirm", big}, 500, "larger than 64 bytes")
	expect(t, hand, call{"tcc", gid, "03", "cancel", big}, 500, "larger than 64 bytes")
	expectOutcomes(t, k.j, "try:409:-", "cancel:200:null-compensation", "confirm:500:proceed", "cancel:500:-")
	if handRan || k.runCount() != 0 || k.balance(t) != initBalance {
		t.Fatalf("a business ran on an oversized payload: by hand %v, %d runs, balance %d", handRan, k.runCount(), k.balance(t))
	}
}
