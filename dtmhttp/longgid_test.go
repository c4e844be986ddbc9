package dtmhttp_test

// A gid longer than the barrier's 128 characters, chosen by an initiator that does not check it
// (dtmcli, another language's client): DTM v1.19 accepts it on its default store (boltdb; its SQL
// stores refuse it at submit, gid being a varchar(128) there), and calls every branch with it. The
// barrier cannot store such a branch, so every call of it is refused the same way. The answer must
// let DTM finish: the action fails (409: the saga rolls back), its compensation has nothing to undo
// (200), where a 400 for each was retried by DTM for as long as the transaction lived.

import (
	"cmp"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/go-resty/resty/v2"

	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// longGid returns a fresh gid of 200 characters.
func longGid() string {
	g := testsvc.Name("longgid-")
	return g + strings.Repeat("x", 200-len(g))
}

func TestLongGidAgainstServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a DTM server")
	}
	srv := dtmserver.StartT(t) // DTM's default store: boltdb
	k := setup(t, nil, nil)
	p := &paths{}
	mux := http.NewServeMux()
	route := func(path, op string, run dtmhttp.Business) {
		h := k.b.Handle(op, run)
		mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.note(r, path)
			h.ServeHTTP(w, r)
		}))
	}
	route("/debit", barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1)))
	route("/debitCompensate", barrier.OpCompensate, dtmhttp.Gorm(k.bar, k.adjust(+1)))
	route("/reserve", barrier.OpTry, dtmhttp.Gorm(k.bar, k.adjust(-1)))
	route("/reserveConfirm", barrier.OpConfirm, dtmhttp.Gorm(k.bar, k.adjust(0)))
	route("/reserveCancel", barrier.OpCancel, dtmhttp.Gorm(k.bar, k.adjust(+1)))
	svc := httptest.NewServer(mux)
	t.Cleanup(svc.Close)
	req := &transfer{Amount: 30}

	t.Run("SagaRollsBack", func(t *testing.T) {
		gid := longGid()
		err := dtmcli.NewSaga(srv.URL(), gid).Add(svc.URL+"/debit", svc.URL+"/debitCompensate", req).Submit()
		if err != nil {
			t.Fatalf("DTM refused the saga of a %d-character gid: %v", len(gid), err)
		}
		tr := settle(t, srv, k, p, gid)
		if tr.Status != dtmcli.StatusFailed {
			t.Fatalf("saga %s, want failed (rolled back)", tr.Status)
		}
		if got := p.statuses(k, "/debit"); !slices.Equal(got, []int{http.StatusConflict}) {
			t.Errorf("/debit answered %v, want one 409", got)
		}
		if got := p.statuses(k, "/debitCompensate"); !slices.Equal(got, []int{http.StatusOK}) {
			t.Errorf("/debitCompensate answered %v, want one 200 (nothing to undo)", got)
		}
	})

	t.Run("TccCancels", func(t *testing.T) {
		gid := longGid()
		err := dtmcli.TccGlobalTransaction(srv.URL(), gid, func(tcc *dtmcli.Tcc) (*resty.Response, error) {
			return tcc.CallBranch(req, svc.URL+"/reserve", svc.URL+"/reserveConfirm", svc.URL+"/reserveCancel")
		})
		if err == nil {
			t.Fatal("a TCC whose try was refused succeeded")
		}
		tr := settle(t, srv, k, p, gid)
		if tr.Status != dtmcli.StatusFailed {
			t.Fatalf("TCC %s, want failed (cancelled)", tr.Status)
		}
		if got := p.statuses(k, "/reserve"); !slices.Equal(got, []int{http.StatusConflict}) {
			t.Errorf("/reserve answered %v, want one 409", got)
		}
		if got := p.statuses(k, "/reserveCancel"); !slices.Equal(got, []int{http.StatusOK}) {
			t.Errorf("/reserveCancel answered %v, want one 200 (nothing to undo)", got)
		}
	})

	t.Run("MySQLStoreRefusesAtSubmit", func(t *testing.T) {
		// DTM's SQL store keeps gids in a varchar(128): the initiator learns of its gid at once.
		err := dtmcli.NewSaga(testsvc.DTMOnMySQL(t).URL(), longGid()).Add(svc.URL+"/debit", svc.URL+"/debitCompensate", req).Submit()
		if err == nil || !strings.Contains(err.Error(), "Data too long") {
			t.Fatalf("DTM on its MySQL store answered the submit of a 200-character gid with %v, want its refusal", err)
		}
	})

	if n := k.runCount(); n != 0 {
		t.Errorf("the business ran %d times for branches the barrier cannot store", n)
	}
	if bal := k.balance(t); bal != initBalance {
		t.Errorf("balance %d, want %d: nothing may have moved", bal, initBalance)
	}
}

// TestInvalidBranchAnswers: every op of a branch the barrier cannot store, as DTM (or an initiator)
// would call it. Those that may fail fail (409), those that undo one succeed with nothing to undo
// (200), the others, which can neither run nor fail, answer 400 logged at error level; a call whose
// query lacks a field is 400 whatever its op. The business never runs.
func TestInvalidBranchAnswers(t *testing.T) {
	k := setup(t, nil, nil)
	run := dtmhttp.Gorm(k.bar, k.adjust(-1))
	gid, long := testsvc.Name("gid-"), longGid()
	longBranch := strings.Repeat("b", 129)
	for _, c := range []struct {
		call   call
		status int
		body   string
		log    string
	}{
		{call{"saga", long, "01", "action", `{"amount":1}`}, 409, `"dtm_result":"FAILURE"`, "level=WARN"},
		{call{"saga", long, "01", "compensate", `{"amount":1}`}, 200, `"dtm_result":"SUCCESS"`, "level=WARN"},
		{call{"tcc", long, "01", "try", `{"amount":1}`}, 409, `"dtm_result":"FAILURE"`, "level=WARN"},
		{call{"tcc", long, "01", "cancel", `{"amount":1}`}, 200, `"dtm_result":"SUCCESS"`, "level=WARN"},
		{call{"tcc", gid, longBranch, "cancel", `{"amount":1}`}, 200, `"dtm_result":"SUCCESS"`, "level=WARN"},
		{call{"workflow", long, "01", "rollback", `{"amount":1}`}, 200, `"dtm_result":"SUCCESS"`, "level=WARN"},
		{call{"tcc", long, "01", "confirm", `{"amount":1}`}, 400, "longer than 128", "level=ERROR"},
		{call{"xa", long, "01", "commit", `{"amount":1}`}, 400, "longer than 128", "level=ERROR"},
		{call{"msg", long, "01", "action", `{"amount":1}`}, 400, "longer than 128", "level=ERROR"},
		{call{"saga", long, "", "compensate", `{"amount":1}`}, 400, "missing branch_id", "level=WARN"},
		{call{"", long, "01", "action", `{"amount":1}`}, 400, "missing trans_type", "level=WARN"},
	} {
		name := c.call.transType + " " + c.call.op
		t.Run(name, func(t *testing.T) {
			before := len(k.j.log())
			h := k.b.Handle(cmp.Or(c.call.op, barrier.OpAction), run)
			expect(t, h, c.call, c.status, c.body)
			if logged := k.j.log()[before:]; !strings.Contains(logged, c.log) || !strings.Contains(logged, "invalid branch") {
				t.Errorf("logged %q, want %s about the invalid branch", logged, c.log)
			}
		})
	}
	if n := k.runCount(); n != 0 {
		t.Errorf("the business ran %d times for branches the barrier cannot store", n)
	}
}
