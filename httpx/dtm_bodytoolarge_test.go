package httpx

// On a DTM branch route (Options.DTM) a payload over MaxBodyBytes is refused before the handler.
// DTM sends a branch's payload unchanged on every call, so every call of the branch is refused
// alike, and DTM reads 413 as "retry": the saga stayed submitted, the TCC aborting, for ever. The
// answer now depends on the op, as package dtmhttp answers a payload it cannot take: an action or try
// fails (409), a compensate, cancel or rollback has nothing to undo (200), a confirm, commit or msg
// action stays 413.

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/go-resty/resty/v2"

	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/internal/dtmserver"
)

// dtmBranchKey keys a DTM branch call by its transaction, branch and op, as DTM sends them.
var dtmBranchKey = All(Query("gid"), Query("branch_id"), Query("op"))

// branchLog records what each path of a DTM branch service answered and how often its handler ran.
type branchLog struct {
	mu       sync.Mutex
	answered map[string][]int
	ran      map[string]int
}

func (l *branchLog) statuses(path string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.answered[path])
}

func (l *branchLog) runs(path string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ran[path]
}

// statusWriter notes the status a response was answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

// branchService serves paths, each guarded by mw, with a handler that succeeds.
func branchService(t *testing.T, mw func(http.Handler) http.Handler, paths ...string) (*httptest.Server, *branchLog) {
	t.Helper()
	l := &branchLog{answered: map[string][]int{}, ran: map[string]int{}}
	mux := http.NewServeMux()
	for _, path := range paths {
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l.mu.Lock()
			l.ran[path]++
			l.mu.Unlock()
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"dtm_result":"SUCCESS"}`))
		}))
		mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sw := &statusWriter{ResponseWriter: w}
			h.ServeHTTP(sw, r)
			l.mu.Lock()
			l.answered[path] = append(l.answered[path], sw.status)
			l.mu.Unlock()
		}))
	}
	svc := httptest.NewServer(mux)
	t.Cleanup(svc.Close)
	return svc, l
}

// settleDTM waits until DTM finishes gid, asking it to retry meanwhile. It fails t at once when a
// path answered 413, which DTM retries for as long as the transaction lives.
func settleDTM(t *testing.T, srv *dtmserver.Server, l *branchLog, gid string, paths ...string) string {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, path := range paths {
			if got := l.statuses(path); slices.Contains(got, http.StatusRequestEntityTooLarge) {
				t.Fatalf("%s answered %v: DTM retries a 413 for ever", path, got)
			}
		}
		tr, err := srv.Query(ctx, gid)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Status == dtmcli.StatusSucceed || tr.Status == dtmcli.StatusFailed {
			return tr.Status
		}
		if time.Now().After(deadline) {
			t.Fatalf("global transaction %s still %q", gid, tr.Status)
		}
		if tr.Status != "" {
			if err := srv.ResetNextCronTime(ctx, gid); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type dtmPayload struct {
	Amount int    `json:"amount"`
	Memo   string `json:"memo"`
}

func TestDTMBodyTooLargeAgainstServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a DTM server")
	}
	srv := dtmserver.StartT(t) // DTM's default store: boltdb
	bd := setup(t, realBackend, &Options{DTM: true, MaxBodyBytes: 256, Key: dtmBranchKey}, nil)
	svc, l := branchService(t, bd.mw, "/debit", "/debitCompensate", "/reserve", "/reserveConfirm", "/reserveCancel")
	small := &dtmPayload{Amount: 10}
	big := &dtmPayload{Amount: 20, Memo: strings.Repeat("m", 1000)}

	t.Run("SagaRollsBack", func(t *testing.T) {
		gid := dtmcli.MustGenGid(srv.URL())
		err := dtmcli.NewSaga(srv.URL(), gid).
			Add(svc.URL+"/debit", svc.URL+"/debitCompensate", small).
			Add(svc.URL+"/debit", svc.URL+"/debitCompensate", big).Submit()
		if err != nil {
			t.Fatal(err)
		}
		if st := settleDTM(t, srv, l, gid, "/debit", "/debitCompensate"); st != dtmcli.StatusFailed {
			t.Fatalf("saga %s, want failed (rolled back)", st)
		}
		if got := l.statuses("/debit"); !slices.Equal(got, []int{http.StatusOK, http.StatusConflict}) {
			t.Errorf("/debit answered %v, want 200 (small) then 409 (oversized: FAILURE)", got)
		}
		if got := l.statuses("/debitCompensate"); !slices.Equal(got, []int{http.StatusOK, http.StatusOK}) {
			t.Errorf("/debitCompensate answered %v, want two 200s (the oversized one has nothing to undo)", got)
		}
		if n, m := l.runs("/debit"), l.runs("/debitCompensate"); n != 1 || m != 1 {
			t.Errorf("handlers ran %d actions and %d compensations, want 1 and 1: only the small branch's", n, m)
		}
	})

	t.Run("TccCancels", func(t *testing.T) {
		gid := dtmcli.MustGenGid(srv.URL())
		err := dtmcli.TccGlobalTransaction(srv.URL(), gid, func(tcc *dtmcli.Tcc) (*resty.Response, error) {
			return tcc.CallBranch(big, svc.URL+"/reserve", svc.URL+"/reserveConfirm", svc.URL+"/reserveCancel")
		})
		if err == nil {
			t.Fatal("a TCC whose try was refused succeeded")
		}
		if st := settleDTM(t, srv, l, gid, "/reserveCancel"); st != dtmcli.StatusFailed {
			t.Fatalf("TCC %s, want failed (cancelled)", st)
		}
		if got := l.statuses("/reserve"); !slices.Equal(got, []int{http.StatusConflict}) {
			t.Errorf("/reserve answered %v, want one 409", got)
		}
		if got := l.statuses("/reserveCancel"); !slices.Equal(got, []int{http.StatusOK}) {
			t.Errorf("/reserveCancel answered %v, want one 200 (nothing to undo)", got)
		}
		if n := l.runs("/reserve") + l.runs("/reserveConfirm") + l.runs("/reserveCancel"); n != 0 {
			t.Errorf("handlers ran %d times for an oversized TCC branch", n)
		}
	})
}

// TestDTMBodyTooLargeAnswers: every op of an oversized DTM branch call, as DTM (or an initiator)
// sends it. The handler never runs.
func TestDTMBodyTooLargeAnswers(t *testing.T) {
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	big := `{"memo":"` + strings.Repeat("m", 300) + `"}`
	for _, c := range []struct {
		name, query string
		dtm         bool
		status      int
		body, log   string
	}{
		{"saga action", "trans_type=saga&gid=g1&branch_id=01&op=action", true, 409, "body-too-large", "level=WARN"},
		{"saga compensate", "trans_type=saga&gid=g1&branch_id=01&op=compensate", true, 200, `{"dtm_result":"SUCCESS"}`, "level=WARN"},
		{"tcc try", "trans_type=tcc&gid=g2&branch_id=01&op=try", true, 409, "body-too-large", "level=WARN"},
		{"tcc cancel", "trans_type=tcc&gid=g2&branch_id=01&op=cancel", true, 200, `{"dtm_result":"SUCCESS"}`, "level=WARN"},
		{"xa rollback", "trans_type=xa&gid=g3&branch_id=01&op=rollback", true, 200, `{"dtm_result":"SUCCESS"}`, "level=WARN"},
		{"tcc confirm", "trans_type=tcc&gid=g2&branch_id=01&op=confirm", true, 413, "body-too-large", "level=ERROR"},
		{"xa commit", "trans_type=xa&gid=g3&branch_id=01&op=commit", true, 413, "body-too-large", "level=ERROR"},
		{"msg action", "trans_type=msg&gid=g4&branch_id=01&op=action", true, 413, "body-too-large", "level=ERROR"},
		{"no op", "trans_type=saga&gid=g1&branch_id=01&x=action", true, 413, "body-too-large", ""},
		{"not DTM", "trans_type=saga&gid=g1&branch_id=01&op=action", false, 413, "body-too-large", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := Header(DefaultHeader) // the key is there; only the payload is refused
			bd := setup(t, memoryBackend, &Options{DTM: c.dtm, MaxBodyBytes: 256, Key: key, Logger: logger}, nil)
			before := logs.Len()
			rec := bd.do(req(http.MethodPost, "/branch?"+c.query, "k", big))
			if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.body) {
				t.Errorf("answered %d %s, want %d with %s", rec.Code, rec.Body, c.status, c.body)
			}
			if strings.Contains(rec.Body.String(), "ONGOING") || c.status != 409 && strings.Contains(rec.Body.String(), "FAILURE") {
				t.Errorf("body %s holds a word DTM reads as another answer", rec.Body)
			}
			logged := logs.String()[before:]
			if c.log == "" && logged != "" || c.log != "" && !strings.Contains(logged, c.log) {
				t.Errorf("logged %q, want %q", logged, c.log)
			}
			if n := bd.calls.Load(); n != 0 {
				t.Errorf("the handler ran %d times", n)
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestDTMOpsAgreeWithDTMHTTP: httpx's reading of DTM's ops is package dtmhttp's and barrier's.
func TestDTMOpsAgreeWithDTMHTTP(t *testing.T) {
	trans := []string{barrier.TransSaga, barrier.TransTCC, barrier.TransXA, barrier.TransMsg, barrier.TransWorkflow}
	ops := []string{barrier.OpTry, barrier.OpConfirm, barrier.OpCancel, barrier.OpAction, barrier.OpCompensate,
		barrier.OpCommit, barrier.OpRollback, barrier.OpMsg}
	for _, tt := range trans {
		for _, op := range ops {
			if got, want := dtmMayFail(tt, op), dtmhttp.MayFail(tt, op); got != want {
				t.Errorf("dtmMayFail(%q, %q) = %v, dtmhttp.MayFail says %v", tt, op, got, want)
			}
		}
	}
	for _, op := range ops {
		if got, want := dtmUndoes(op), barrier.OriginOp(op) != ""; got != want {
			t.Errorf("dtmUndoes(%q) = %v, barrier.OriginOp says %v", op, got, want)
		}
	}
}
