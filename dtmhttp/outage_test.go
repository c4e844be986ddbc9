package dtmhttp_test

// With an Options.IsPermanent that calls every error permanent (the business's plain errors are its
// refusals), an outage of the barrier's database or Redis is still not the business's answer: it
// is answered 500 and DTM calls again, rather than 409, which rolled the saga back (and answered a
// COMMIT whose reply was lost as a failure).

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/internal/testsvc"
)

func everyErrorPermanent(error) bool { return true }

func TestOutageIsRetriedWhateverIsPermanent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a DTM server")
	}
	srv := dtmserver.StartT(t)
	k := setup(t, nil, &dtmhttp.Options{IsPermanent: everyErrorPermanent})
	// The step's database, behind a proxy that is cut during the first delivery.
	px := testsvc.StartProxy(t, "127.0.0.1:3306")
	db, err := gorm.Open(mysql.Open("root:@tcp("+px.Addr()+")/"+testsvc.Database+"?timeout=3s"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	bar, err := barrier.NewGorm(db, &barrier.GormOptions{Table: k.bar.Table()})
	if err != nil {
		t.Fatal(err)
	}
	p := &paths{}
	var once sync.Once
	action := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(bar, k.adjust(-1)))
	compensate := k.b.Handle(barrier.OpCompensate, dtmhttp.Gorm(bar, k.adjust(+1)))
	mux := http.NewServeMux()
	mux.Handle("/debit", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.note(r, "/debit")
		cut := false
		once.Do(func() { cut = true })
		if cut {
			px.Cut()
			defer px.Restore()
		}
		action.ServeHTTP(w, r)
	}))
	mux.Handle("/debitCompensate", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.note(r, "/debitCompensate")
		compensate.ServeHTTP(w, r)
	}))
	svc := httptest.NewServer(mux)
	t.Cleanup(svc.Close)

	gid := dtmcli.MustGenGid(srv.URL())
	if err := dtmcli.NewSaga(srv.URL(), gid).Add(svc.URL+"/debit", svc.URL+"/debitCompensate", &transfer{Amount: 30}).Submit(); err != nil {
		t.Fatal(err)
	}
	tr := settle(t, srv, k, p, gid)
	if got := p.statuses(k, "/debit"); len(got) < 2 || got[0] != http.StatusInternalServerError || got[len(got)-1] != http.StatusOK {
		t.Fatalf("/debit answered %v, want 500 during the outage, then 200", got)
	}
	if tr.Status != dtmcli.StatusSucceed {
		t.Fatalf("saga %s after a database outage, want succeed", tr.Status)
	}
	if bal := k.balance(t); bal != initBalance-30 {
		t.Fatalf("balance %d, want %d", bal, initBalance-30)
	}
}

func TestRedisOutageIsRetriedWhateverIsPermanent(t *testing.T) {
	k := setup(t, nil, &dtmhttp.Options{IsPermanent: everyErrorPermanent})
	px := testsvc.StartProxy(t, testsvc.RedisAddr())
	opts := testsvc.RedisOptions()
	opts.Addr, opts.MaxRetries = px.Addr(), -1
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	bar, err := barrier.NewRedis(rdb, &barrier.RedisOptions{Prefix: testsvc.Name("idemkit_dtmhttp_rbar_")})
	if err != nil {
		t.Fatal(err)
	}
	key := "{" + testsvc.Name("acct") + "}:balance"
	testsvc.CleanRedis(t, k.rdb, key)
	action := k.b.Handle(barrier.OpAction, dtmhttp.Redis(bar, func(_ context.Context, p transfer) (*barrier.RedisCall, error) {
		return barrier.AdjustAmount(key, -int64(p.Amount)), nil
	}))
	px.Cut()
	expect(t, action, call{"saga", testsvc.Name("gid-"), "01", "action", `{"amount":1}`}, 500, "")
	if got := k.j.outcomes(); !slices.Equal(got, []string{"action:500:-"}) {
		t.Fatalf("events %q", got)
	}
}
