package saga_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/txstatus"
)

// app is one application (or one Lifecycle) that starts sagas and reconciles its records.
type app struct {
	name   string
	guard  *idemkit.Guard
	lc     *hooks.Lifecycle
	scope  string
	dtm    string
	mu     sync.Mutex
	called []string // "commit gid" / "rollback gid" by this app's hooks
}

func newApp(t *testing.T, name string, store *record.Store, namespace, scope, dtm string) *app {
	t.Helper()
	a := &app{name: name, scope: scope, dtm: dtm}
	var err error
	if a.guard, err = idemkit.New(store, &idemkit.Options{Namespace: namespace, Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	note := func(s string) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.called = append(a.called, s)
	}
	a.lc = &hooks.Lifecycle{
		Guard: a.guard,
		OnCommit: hooks.CommitFunc(func(_ context.Context, tx *hooks.Txn, _ []byte) error {
			note("commit " + tx.GID)
			return nil
		}),
		OnRollback: hooks.RollbackFunc(func(_ context.Context, tx *hooks.Txn, _ error) error {
			note("rollback " + tx.GID)
			return nil
		}),
	}
	return a
}

// startAndDie claims key, submits a saga of one step that succeeds at once and detaches, as an
// initiator that died after its submit; it returns the gid. (A saga without steps would look like a
// submit that landed on a reconciler's fence, which ran nothing: see txstatus.Info.RanNothingFor.)
func (a *app) startAndDie(t *testing.T, key string) string {
	t.Helper()
	gid := txstatus.NewGID()
	txn, _, err := a.lc.Begin(ctxb, "saga", gid, idemkit.Call{Scope: a.scope, Key: key, Result: []byte(a.name)})
	if err != nil {
		t.Fatal(err)
	}
	step := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"dtm_result":"SUCCESS"}`))
	}))
	t.Cleanup(step.Close)
	s := dtmcli.NewSaga(a.dtm, gid).Add(step.URL+"/action", step.URL+"/compensate", nil)
	if err := (&txstatus.Client{Server: a.dtm}).Call(ctxb, "submit", gid, &s.TransBase); err != nil {
		t.Fatal(err)
	}
	a.lc.Detach(ctxb, txn)
	return gid
}

func (a *app) reconcile(t *testing.T) int {
	t.Helper()
	rc := &hooks.Reconciler{Lifecycle: a.lc, Scopes: []string{a.scope}, Manager: &txstatus.Client{Server: a.dtm}}
	n, err := rc.RunOnce(ctxb, time.Now().Add(time.Hour), 100)
	if err != nil {
		t.Fatalf("%s's reconciler: %v", a.name, err)
	}
	return n
}

func (a *app) hooksCalled() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.called)
}

func (a *app) status(t *testing.T, key string) idemkit.Status {
	t.Helper()
	rec, err := a.guard.Get(ctxb, a.scope, key)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Status
}

// TestReconcilersSettleOnlyTheirOwn (issue 11, item 10b): on one record table, each reconciler settles
// only its own records, with its own hooks and its own DTM — two applications (two namespaces, the
// same scope, two DTM servers), and two Lifecycles (two scopes) on one DTM. A reconciler asking its
// DTM about another application's gid would find it unknown and fence it: that must never happen.
func TestReconcilersSettleOnlyTheirOwn(t *testing.T) {
	t.Parallel()
	t.Run("TwoApplications", func(t *testing.T) {
		t.Parallel()
		k := newBank(t, nil)
		other := dtmserver.StartT(t)
		billing := newApp(t, "billing", k.store, "billing", "POST /orders", k.srv.URL())
		shipping := newApp(t, "shipping", k.store, "shipping", "POST /orders", other.URL())
		bg := billing.startAndDie(t, "order-1")
		sg := shipping.startAndDie(t, "order-1") // the same scope and key, another application
		waitTrans(t, k.srv, bg)
		waitTrans(t, other, sg)

		if n := billing.reconcile(t); n != 1 {
			t.Fatalf("billing settled %d records, want its one", n)
		}
		if got := billing.hooksCalled(); !slices.Equal(got, []string{"commit " + bg}) {
			t.Fatalf("billing's hooks ran %q", got)
		}
		if got := shipping.hooksCalled(); len(got) != 0 {
			t.Fatalf("shipping's hooks ran %q during billing's pass", got)
		}
		if st := shipping.status(t, "order-1"); st != idemkit.StatusProcessing {
			t.Fatalf("shipping's record %s after billing's pass", st)
		}
		if tr, err := k.srv.Query(ctxb, sg); err != nil || tr.Status != "" {
			t.Fatalf("billing's DTM holds shipping's gid: %+v, %v", tr, err)
		}
		if n := shipping.reconcile(t); n != 1 {
			t.Fatalf("shipping settled %d records", n)
		}
		if got := shipping.hooksCalled(); !slices.Equal(got, []string{"commit " + sg}) {
			t.Fatalf("shipping's hooks ran %q", got)
		}
		if billing.status(t, "order-1") != idemkit.StatusSucceeded || shipping.status(t, "order-1") != idemkit.StatusSucceeded {
			t.Fatal("both records should be SUCCEEDED")
		}
	})
	t.Run("TwoLifecycles", func(t *testing.T) {
		t.Parallel()
		k := newBank(t, nil)
		orders := newApp(t, "orders", k.store, "", "POST /orders", k.srv.URL())
		refunds := newApp(t, "refunds", k.store, "", "POST /refunds", k.srv.URL())
		og := orders.startAndDie(t, "k")
		rg := refunds.startAndDie(t, "k")
		waitTrans(t, k.srv, og)
		waitTrans(t, k.srv, rg)
		if n := orders.reconcile(t); n != 1 {
			t.Fatalf("orders settled %d records, want its one", n)
		}
		if got := orders.hooksCalled(); !slices.Equal(got, []string{"commit " + og}) {
			t.Fatalf("orders' hooks ran %q", got)
		}
		if st := refunds.status(t, "k"); st != idemkit.StatusProcessing || len(refunds.hooksCalled()) != 0 {
			t.Fatalf("refunds' record %s, hooks %q after the orders' pass", st, refunds.hooksCalled())
		}
		if n := refunds.reconcile(t); n != 1 || !slices.Equal(refunds.hooksCalled(), []string{"commit " + rg}) {
			t.Fatalf("refunds settled %d, hooks %q", n, refunds.hooksCalled())
		}
	})
}
