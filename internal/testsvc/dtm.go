package testsvc

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit/internal/dtmserver"
)

// DTMOnMySQL starts a private DTM server whose store is a database of its own on the test MySQL
// server (DTM's SQL store, where the boltdb default differs: column widths, for one), and stops it and
// drops the database when the test ends.
func DTMOnMySQL(t testing.TB) *dtmserver.Server {
	t.Helper()
	cfg, err := mysql.ParseDSN(MySQLDSN())
	if err != nil {
		t.Fatalf("parsing IDEMKIT_TEST_MYSQL: %v", err)
	}
	host, p, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		t.Fatalf("IDEMKIT_TEST_MYSQL address %q: %v", cfg.Addr, err)
	}
	port, _ := strconv.Atoi(p)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db := Name("dtmstore_")
	if err := dtmserver.CreateMySQLStore(ctx, MySQLDSN(), db); err != nil {
		t.Fatal(err)
	}
	admin := MySQL(t, nil)
	t.Cleanup(func() { admin.Exec("DROP DATABASE IF EXISTS " + db) })
	srv, err := dtmserver.Start(ctx, &dtmserver.Options{Env: []string{"LOG_LEVEL=warn"},
		MySQL: &dtmserver.MySQLStore{Host: host, Port: port, User: cfg.User, Password: cfg.Passwd, DB: db}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv
}
