package dtmmsg_test

import (
	"context"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/txstatus"
)

var ctxb = context.Background()

// shared is the package's DTM server, started on first use and stopped by TestMain.
var shared = dtmserver.Shared{Env: []string{"LOG_LEVEL=warn"}}

func TestMain(m *testing.M) {
	chaosdtmmsg.RunChildIfRequested() // the kill tests re-execute this binary as publisher processes
	code := m.Run()
	_ = shared.Stop()
	os.Exit(code)
}

// env is one test's world: its tables on MariaDB, the branch and back-check service, a DTM server.
type env struct {
	w   *chaosdtmmsg.World
	dtm *dtmserver.Server
	svc string
}

func setup(t *testing.T) *env {
	t.Helper()
	testsvc.MySQL(t, nil) // the test database exists, or the test fails/skips
	dtm := shared.Get(t)
	w, err := chaosdtmmsg.Open(testsvc.MySQLDSN()+testsvc.Database, chaosdtmmsg.NewTables(testsvc.Name("msg")), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	if err := w.Create(ctxb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Drop(ctxb) })
	h, err := w.Handler(false)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{w: w, dtm: dtm, svc: srv.URL}
}

func (e *env) count(t *testing.T, table, where string, args ...any) int {
	t.Helper()
	var n int64
	if err := e.w.DB.Raw("SELECT COUNT(*) FROM "+table+" WHERE "+where, args...).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// delivered publishes an order of amount with key through pub, waits (at most 30 s) until DTM reports
// the message succeeded (delivered to its branches), and returns the status client it asked.
func (e *env) delivered(t *testing.T, pub *dtmmsg.Publisher, key string, amount int64) *txstatus.Client {
	t.Helper()
	out, err := e.w.PublishOrder(ctxb, pub, e.svc, key, amount, nil)
	if err != nil || out.Status != txstatus.Submitted {
		t.Fatalf("publish: %+v %v", out, err)
	}
	status := &txstatus.Client{Server: e.dtm.URL()}
	wctx, cancel := context.WithTimeout(ctxb, 30*time.Second)
	defer cancel()
	if st, err := status.Wait(wctx, out.GID); err != nil || st != txstatus.Succeed {
		t.Fatalf("message %s: %v", st, err)
	}
	return status
}
