package dtmmsg_test

import (
	"context"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/internal/testsvc"
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
