package dtmhttp_test

// Against a real DTM server (internal/dtmserver): a business that returns dtmcli's own ErrFailure or
// ErrOngoing, wrapped, is answered so that DTM compensates (FAILURE) or polls (ONGOING), as a dtmcli
// handler would be (dtmcli.Result2HttpJSON), instead of retrying with backoff forever.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/go-resty/resty/v2"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/internal/dtmserver"
)

// paths remembers which route served each branch (gid, branch_id, op).
type paths struct{ m sync.Map }

func (p *paths) note(r *http.Request, path string) {
	q := r.URL.Query()
	p.m.Store(q.Get("gid")+"|"+q.Get("branch_id")+"|"+q.Get("op"), path)
}

// statuses returns the statuses answered at path so far.
func (p *paths) statuses(k *bundle, path string) []int {
	k.j.mu.Lock()
	defer k.j.mu.Unlock()
	var out []int
	for _, e := range k.j.events {
		if at, ok := p.m.Load(e.GID + "|" + e.BranchID + "|" + e.Op); ok && at == path {
			out = append(out, e.Status)
		}
	}
	return out
}

// settle waits until DTM finishes gid, asking it to retry each time a branch was answered. It fails t at
// once when a path in never500 was answered 500, which DTM retries with backoff (before the fix, forever).
func settle(t *testing.T, srv *dtmserver.Server, k *bundle, p *paths, gid string, never500 ...string) *dtmserver.Trans {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	kicked := 0
	for {
		for _, path := range never500 {
			if got := p.statuses(k, path); slices.Contains(got, http.StatusInternalServerError) {
				t.Fatalf("%s answered %v: DTM retries a 500 with backoff instead of compensating or polling", path, got)
			}
		}
		tr, err := srv.Query(ctx, gid)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Status == dtmcli.StatusSucceed || tr.Status == dtmcli.StatusFailed {
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("global transaction %s still %q; answers %q", gid, tr.Status, k.j.outcomes())
		}
		if n := len(k.j.outcomes()); n > kicked && tr.Status != "" {
			kicked = n
			if err := srv.ResetNextCronTime(ctx, gid); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDTMErrorsAgainstServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a DTM server")
	}
	srv := dtmserver.StartT(t)
	k := setup(t, nil, nil)
	p := &paths{}
	const amount = 30

	var mu sync.Mutex
	ongoing := 2 // deliveries of /slow answered "not yet" before it runs
	mux := http.NewServeMux()
	route := func(path, op string, run dtmhttp.Business) {
		h := k.b.Handle(op, run)
		mux.Handle("POST "+path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.note(r, path)
			h.ServeHTTP(w, r)
		}))
	}
	route("/debit", barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1)))
	route("/debitCompensate", barrier.OpCompensate, dtmhttp.Gorm(k.bar, k.adjust(+1)))
	// /declined debits, then the card is declined: a wrapped dtmcli.ErrFailure rolls its writes back.
	route("/declined", barrier.OpAction, dtmhttp.Gorm(k.bar, func(ctx context.Context, tx *gorm.DB, p transfer) error {
		if err := k.adjust(-1)(ctx, tx, p); err != nil {
			return err
		}
		return fmt.Errorf("card declined: %w", dtmcli.ErrFailure)
	}))
	route("/declinedCompensate", barrier.OpCompensate, dtmhttp.Gorm(k.bar, k.adjust(+1)))
	// /slow is not ready for its first deliveries: a wrapped dtmcli.ErrOngoing, then it debits.
	route("/slow", barrier.OpAction, dtmhttp.Gorm(k.bar, func(ctx context.Context, tx *gorm.DB, p transfer) error {
		mu.Lock()
		wait := ongoing > 0
		ongoing--
		mu.Unlock()
		if wait {
			return fmt.Errorf("bank busy: %w", dtmcli.ErrOngoing)
		}
		return k.adjust(-1)(ctx, tx, p)
	}))
	route("/slowCompensate", barrier.OpCompensate, dtmhttp.Gorm(k.bar, k.adjust(+1)))
	route("/reserve", barrier.OpTry, dtmhttp.Gorm(k.bar, func(ctx context.Context, tx *gorm.DB, p transfer) error {
		return fmt.Errorf("limit reached: %w", dtmcli.ErrFailure)
	}))
	route("/reserveConfirm", barrier.OpConfirm, dtmhttp.Gorm(k.bar, k.adjust(-1)))
	route("/reserveCancel", barrier.OpCancel, dtmhttp.Gorm(k.bar, k.adjust(+1)))
	svc := httptest.NewServer(mux)
	t.Cleanup(svc.Close)
	req := &transfer{Amount: amount}

	t.Run("SagaFailureCompensates", func(t *testing.T) {
		gid := dtmcli.MustGenGid(srv.URL())
		err := dtmcli.NewSaga(srv.URL(), gid).
			Add(svc.URL+"/debit", svc.URL+"/debitCompensate", req).
			Add(svc.URL+"/declined", svc.URL+"/declinedCompensate", req).Submit()
		if err != nil {
			t.Fatal(err)
		}
		tr := settle(t, srv, k, p, gid, "/declined")
		if tr.Status != dtmcli.StatusFailed {
			t.Fatalf("saga %s, want failed (rolled back)", tr.Status)
		}
		if got := p.statuses(k, "/declined"); !slices.Equal(got, []int{http.StatusConflict}) {
			t.Fatalf("/declined answered %v, want one 409", got)
		}
		if got := p.statuses(k, "/debitCompensate"); !slices.Equal(got, []int{http.StatusOK}) {
			t.Fatalf("/debitCompensate answered %v, want one 200", got)
		}
		if bal := k.balance(t); bal != initBalance {
			t.Fatalf("balance %d after the rollback, want %d", bal, initBalance)
		}
	})

	t.Run("SagaOngoingIsRetried", func(t *testing.T) {
		gid := dtmcli.MustGenGid(srv.URL())
		if err := dtmcli.NewSaga(srv.URL(), gid).Add(svc.URL+"/slow", svc.URL+"/slowCompensate", req).Submit(); err != nil {
			t.Fatal(err)
		}
		tr := settle(t, srv, k, p, gid, "/slow")
		if tr.Status != dtmcli.StatusSucceed {
			t.Fatalf("saga %s, want succeed", tr.Status)
		}
		if got := p.statuses(k, "/slow"); !slices.Equal(got, []int{http.StatusTooEarly, http.StatusTooEarly, http.StatusOK}) {
			t.Fatalf("/slow answered %v, want 425, 425, 200", got)
		}
		if bal := k.balance(t); bal != initBalance-amount {
			t.Fatalf("balance %d, want %d", bal, initBalance-amount)
		}
	})

	t.Run("TccTryFailureAborts", func(t *testing.T) {
		gid := dtmcli.MustGenGid(srv.URL())
		err := dtmcli.TccGlobalTransaction(srv.URL(), gid, func(tcc *dtmcli.Tcc) (*resty.Response, error) {
			return tcc.CallBranch(req, svc.URL+"/reserve", svc.URL+"/reserveConfirm", svc.URL+"/reserveCancel")
		})
		if err == nil {
			t.Fatal("a TCC whose try failed succeeded")
		}
		tr := settle(t, srv, k, p, gid, "/reserve")
		if tr.Status != dtmcli.StatusFailed {
			t.Fatalf("TCC %s, want failed", tr.Status)
		}
		if got := p.statuses(k, "/reserve"); !slices.Equal(got, []int{http.StatusConflict}) {
			t.Fatalf("/reserve answered %v, want one 409", got)
		}
		if got := p.statuses(k, "/reserveCancel"); !slices.Equal(got, []int{http.StatusOK}) {
			t.Fatalf("/reserveCancel answered %v, want one 200 (a null compensation)", got)
		}
	})
}
