package barrier

// End to end: the scenarios of DTM's barrier tests through a real DTM server (internal/dtmserver), which
// calls a small HTTP business (httptest.Server) whose handlers run behind the barrier, with balances on
// MariaDB (gorm) and on Redis. Sagas and TCCs are submitted with dtmcli; the outcome is read from the
// server's query API.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/dtm-labs/client/dtmcli/dtmimp"
	"github.com/go-resty/resty/v2"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// busiReq is the branch payload, as DTM's test busi.ReqHTTP.
type busiReq struct {
	Amount         int    `json:"amount"`
	TransInResult  string `json:"trans_in_result"`
	TransOutResult string `json:"trans_out_Result"`
}

// route is one business endpoint: which account, which change, which sign of the amount.
type route struct {
	uid      int
	c        change
	sign     int
	failable bool // an action or try that the request may ask to fail
}

var routes = map[string]route{
	"/SagaBTransOut":       {transOut, adjustBalance, -1, true},
	"/SagaBTransOutCom":    {transOut, adjustBalance, +1, false},
	"/SagaBTransIn":        {transIn, adjustBalance, +1, true},
	"/SagaBTransInCom":     {transIn, adjustBalance, -1, false},
	"/TccBTransOutTry":     {transOut, adjustTrading, -1, true},
	"/TccBTransOutConfirm": {transOut, settle, -1, false},
	"/TccBTransOutCancel":  {transOut, adjustTrading, +1, false},
	"/TccBTransInTry":      {transIn, adjustTrading, +1, true},
	"/TccBTransInConfirm":  {transIn, settle, +1, false},
	"/TccBTransInCancel":   {transIn, adjustTrading, -1, false},
}

// fault is injected into the next delivery of a route.
type fault int

const (
	lostAnswer fault = iota + 1 // run the branch, then answer 425 ONGOING as if the answer was lost: DTM delivers again
	panicking                   // the business panics (Redis: raises a Lua error): DTM sees a failure and retries
)

// busi is the HTTP business of one backend.
type busi struct {
	k   bank
	srv *httptest.Server

	mu       sync.Mutex
	outcomes map[string][]Outcome // route → outcome of each delivery that reached the barrier
	faults   map[string][]fault
	kicks    int // injected faults answered; each needs the server to retry
}

func newBusi(t *testing.T, k bank) *busi {
	s := &busi{k: k, outcomes: map[string][]Outcome{}, faults: map[string][]fault{}}
	mux := http.NewServeMux()
	for path, rt := range routes {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, path, rt) })
	}
	s.srv = httptest.NewUnstartedServer(mux)
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the injected panics
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *busi) url(path string) string { return s.srv.URL + path }

func (s *busi) inject(path string, f fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[path] = append(s.faults[path], f)
}

func (s *busi) nextFault(path string) fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.faults[path]) == 0 {
		return 0
	}
	f := s.faults[path][0]
	s.faults[path] = s.faults[path][1:]
	s.kicks++
	return f
}

func (s *busi) kicksSoFar() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kicks
}

func (s *busi) outcomesOf(path string) []Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Outcome(nil), s.outcomes[path]...)
}

func (s *busi) serve(w http.ResponseWriter, r *http.Request, path string, rt route) {
	b, err := FromRequest(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req busiReq
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fail := rt.failable && (rt.uid == transOut && req.TransOutResult == dtmcli.ResultFailure ||
		rt.uid == transIn && req.TransInResult == dtmcli.ResultFailure)
	f := s.nextFault(path)
	if f == panicking {
		if _, err := s.k.panicking(r.Context(), b, rt.uid); err != nil { // Redis: the Lua error
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		panic("unreachable: the business panics")
	}
	out, err := s.k.run(r.Context(), b, rt.uid, rt.c, rt.sign*req.Amount, fail)
	s.mu.Lock()
	s.outcomes[path] = append(s.outcomes[path], out)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case f == lostAnswer && err == nil:
		w.WriteHeader(http.StatusTooEarly)
		fmt.Fprint(w, `{"dtm_result":"ONGOING"}`)
	case err == nil:
		fmt.Fprint(w, `{"dtm_result":"SUCCESS"}`)
	case idemkit.IsPermanent(err):
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"dtm_result":"FAILURE"}`)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// settle waits until gid succeeds or fails, asking the server to retry after each injected fault.
func settleTrans(t *testing.T, srv *dtmserver.Server, s *busi, gid string) *dtmserver.Trans {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	kicked := 0
	for {
		tr, err := srv.Query(ctx, gid)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Status == dtmcli.StatusSucceed || tr.Status == dtmcli.StatusFailed {
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("global transaction %s still %q", gid, tr.Status)
		}
		if k := s.kicksSoFar(); k > kicked && tr.Status != "" {
			kicked = k
			if err := srv.ResetNextCronTime(ctx, gid); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// branchStatus returns "op:status" for each branch id in order, e.g. "01 compensate:prepared".
func branchStatus(tr *dtmserver.Trans) string {
	var parts []string
	for _, b := range tr.Branches {
		parts = append(parts, b.BranchID+" "+b.Op+":"+b.Status)
	}
	return strings.Join(parts, ", ")
}

func expectTrans(t *testing.T, tr *dtmserver.Trans, status, branches string) {
	t.Helper()
	if tr.Status != status || branchStatus(tr) != branches {
		t.Fatalf("transaction %s %s [%s]; want %s [%s]", tr.Gid, tr.Status, branchStatus(tr), status, branches)
	}
}

func expectOutcomes(t *testing.T, s *busi, path string, want ...Outcome) {
	t.Helper()
	if got := s.outcomesOf(path); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s outcomes %v, want %v", path, got, want)
	}
}

func saga(srv *dtmserver.Server, s *busi, gid string, req *busiReq) *dtmcli.Saga {
	return dtmcli.NewSaga(srv.URL(), gid).
		Add(s.url("/SagaBTransOut"), s.url("/SagaBTransOutCom"), req).
		Add(s.url("/SagaBTransIn"), s.url("/SagaBTransInCom"), req)
}

func tcc(srv *dtmserver.Server, s *busi, gid string, req *busiReq) error {
	return dtmcli.TccGlobalTransaction(srv.URL(), gid, func(tcc *dtmcli.Tcc) (*resty.Response, error) {
		if _, err := tcc.CallBranch(req, s.url("/TccBTransOutTry"), s.url("/TccBTransOutConfirm"), s.url("/TccBTransOutCancel")); err != nil {
			return nil, err
		}
		return tcc.CallBranch(req, s.url("/TccBTransInTry"), s.url("/TccBTransInConfirm"), s.url("/TccBTransInCancel"))
	})
}

func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end tests run a DTM server")
	}
	srv := dtmserver.StartT(t)
	for _, be := range []backend{
		{"mariadb", func(t testing.TB) bank { return newGormBank(t, testsvc.MySQL(t, nil), ownTx) }},
		{"redis", func(t testing.TB) bank { return newRedisBank(t) }},
	} {
		t.Run(be.name, func(t *testing.T) {
			setup := func(t *testing.T) (bank, *busi, string) {
				k := be.new(t)
				return k, newBusi(t, k), testsvc.Name("gid-")
			}

			t.Run("SagaNormal", func(t *testing.T) {
				k, s, gid := setup(t)
				if err := saga(srv, s, gid, &busiReq{Amount: amount}).Submit(); err != nil {
					t.Fatal(err)
				}
				expectTrans(t, settleTrans(t, srv, s, gid), dtmcli.StatusSucceed,
					"01 compensate:prepared, 01 action:succeed, 02 compensate:prepared, 02 action:succeed")
				checkAccounts(t, k, moved)
			})

			t.Run("SagaRollbackNullCompensation", func(t *testing.T) {
				k, s, gid := setup(t)
				if err := saga(srv, s, gid, &busiReq{Amount: amount, TransInResult: dtmcli.ResultFailure}).Submit(); err != nil {
					t.Fatal(err)
				}
				expectTrans(t, settleTrans(t, srv, s, gid), dtmcli.StatusFailed,
					"01 compensate:succeed, 01 action:succeed, 02 compensate:succeed, 02 action:failed")
				expectOutcomes(t, s, "/SagaBTransIn", Proceed) // it ran and refused: rolled back
				expectOutcomes(t, s, "/SagaBTransInCom", NullCompensation)
				expectOutcomes(t, s, "/SagaBTransOutCom", Proceed)
				checkAccounts(t, k, unchanged)
			})

			t.Run("SagaDeliveredTwice", func(t *testing.T) {
				k, s, gid := setup(t)
				s.inject("/SagaBTransOut", lostAnswer)
				s.inject("/SagaBTransOutCom", lostAnswer)
				if err := saga(srv, s, gid, &busiReq{Amount: amount, TransInResult: dtmcli.ResultFailure}).Submit(); err != nil {
					t.Fatal(err)
				}
				expectTrans(t, settleTrans(t, srv, s, gid), dtmcli.StatusFailed,
					"01 compensate:succeed, 01 action:succeed, 02 compensate:succeed, 02 action:failed")
				expectOutcomes(t, s, "/SagaBTransOut", Proceed, Duplicate)
				expectOutcomes(t, s, "/SagaBTransOutCom", Proceed, Duplicate)
				checkAccounts(t, k, unchanged)
			})

			t.Run("SagaBusinessPanics", func(t *testing.T) {
				k, s, gid := setup(t)
				s.inject("/SagaBTransOut", panicking)
				if err := saga(srv, s, gid, &busiReq{Amount: amount}).Submit(); err != nil {
					t.Fatal(err)
				}
				expectTrans(t, settleTrans(t, srv, s, gid), dtmcli.StatusSucceed,
					"01 compensate:prepared, 01 action:succeed, 02 compensate:prepared, 02 action:succeed")
				expectOutcomes(t, s, "/SagaBTransOut", Proceed) // the retry after the panic
				checkAccounts(t, k, moved)
			})

			t.Run("TccNormal", func(t *testing.T) {
				k, s, gid := setup(t)
				if err := tcc(srv, s, gid, &busiReq{Amount: amount}); err != nil {
					t.Fatal(err)
				}
				expectTrans(t, settleTrans(t, srv, s, gid), dtmcli.StatusSucceed,
					"01 cancel:prepared, 01 confirm:succeed, 02 cancel:prepared, 02 confirm:succeed")
				checkAccounts(t, k, moved)
			})

			t.Run("TccRollback", func(t *testing.T) {
				k, s, gid := setup(t)
				if err := tcc(srv, s, gid, &busiReq{Amount: amount, TransInResult: dtmcli.ResultFailure}); err == nil {
					t.Fatal("TCC with a failing try succeeded")
				}
				expectTrans(t, settleTrans(t, srv, s, gid), dtmcli.StatusFailed,
					"01 cancel:succeed, 01 confirm:prepared, 02 cancel:succeed, 02 confirm:prepared")
				expectOutcomes(t, s, "/TccBTransOutCancel", Proceed)
				expectOutcomes(t, s, "/TccBTransInCancel", NullCompensation)
				checkAccounts(t, k, unchanged)
			})

			// TccDisorder: DTM's runTestTccBarrierDisorder. The branch is registered but its try is held
			// back; the TCC aborts, the server delivers cancel twice (the first answer is lost), and only
			// then the try arrives: it hangs, and the balances never move.
			t.Run("TccDisorder", func(t *testing.T) {
				k, s, gid := setup(t)
				s.inject("/TccBTransOutCancel", lostAnswer)
				req := &busiReq{Amount: amount}
				var branchID string
				err := dtmcli.TccGlobalTransaction(srv.URL(), gid, func(tcc *dtmcli.Tcc) (*resty.Response, error) {
					branchID = tcc.NewSubBranchID()
					if err := dtmimp.TransRegisterBranch(&tcc.TransBase, map[string]string{
						"data":      dtmimp.MustMarshalString(req),
						"branch_id": branchID,
						OpConfirm:   s.url("/TccBTransOutConfirm"),
						OpCancel:    s.url("/TccBTransOutCancel"),
					}, "registerBranch"); err != nil {
						return nil, err
					}
					return nil, errors.New("a cancelled tcc")
				})
				if err == nil || !strings.Contains(err.Error(), "a cancelled tcc") {
					t.Fatalf("TCC: %v", err)
				}
				expectTrans(t, settleTrans(t, srv, s, gid), dtmcli.StatusFailed, "01 cancel:succeed, 01 confirm:prepared")
				expectOutcomes(t, s, "/TccBTransOutCancel", NullCompensation, Duplicate)

				q := url.Values{"dtm": {srv.URL()}, "gid": {gid}, "branch_id": {branchID}, "trans_type": {TransTCC}, "op": {OpTry}}
				body, _ := json.Marshal(req)
				resp, err := http.Post(s.url("/TccBTransOutTry")+"?"+q.Encode(), "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("late try answered %d, want 200 (a hanging try succeeds doing nothing)", resp.StatusCode)
				}
				expectOutcomes(t, s, "/TccBTransOutTry", Hanging)
				checkAccounts(t, k, unchanged)
			})
		})
	}
}
