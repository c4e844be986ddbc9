//go:build unix

package dtmserver_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/cluster"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestMySQLStoreShared starts two servers on one MySQL store (a private MariaDB): a transaction
// prepared through the first is seen and finished through the second, also after the first was
// killed.
func TestMySQLStoreShared(t *testing.T) {
	db := cluster.StartMariaDBT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	for range 2 { // idempotent: the second run keeps the tables
		if err := dtmserver.CreateMySQLStore(ctx, db.DSN(""), "dtm_shared"); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := sql.Open("mysql", db.DSN("dtm_shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var tables int
	if err := conn.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'dtm_shared'").Scan(&tables); err != nil || tables != 3 {
		t.Fatalf("%d tables in the store (%v), want trans_global, trans_branch_op and kv", tables, err)
	}
	if err := dtmserver.CreateMySQLStore(ctx, db.DSN(""), "bad name"); err == nil {
		t.Fatal("CreateMySQLStore accepted an invalid database name")
	}

	store := &dtmserver.MySQLStore{Host: "127.0.0.1", Port: db.Port(), User: "root", DB: "dtm_shared"}
	var servers []*dtmserver.Server
	for range 2 {
		s, err := dtmserver.Start(ctx, &dtmserver.Options{MySQL: store})
		if err != nil {
			testsvc.Unavailable(t, "DTM server", err)
		}
		t.Cleanup(func() { _ = s.Stop() })
		servers = append(servers, s)
	}
	a, b := servers[0], servers[1]
	post := func(s *dtmserver.Server, op string, body any) {
		t.Helper()
		j, _ := json.Marshal(body)
		resp, err := http.Post(s.URL()+"/"+op, "application/json", bytes.NewReader(j))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", op, resp.StatusCode)
		}
	}
	gid := testsvc.Name("gid-")
	post(a, "prepare", map[string]string{"gid": gid, "trans_type": "tcc"})
	if tr, err := b.Query(ctx, gid); err != nil || tr.Status != "prepared" {
		t.Fatalf("the other server sees %+v, %v; want prepared", tr, err)
	}
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := a.Kill(); err != nil || !a.Exited() {
		t.Fatalf("second Kill: %v, exited %v", err, a.Exited())
	}
	post(b, "abort", map[string]string{"gid": gid, "trans_type": "tcc"})
	deadline := time.Now().Add(30 * time.Second)
	for {
		tr, err := b.Query(ctx, gid)
		if err == nil && tr.Status == "failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after abort through the survivor: %+v, %v", tr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var status string
	if err := conn.QueryRow("SELECT status FROM trans_global WHERE gid = ?", gid).Scan(&status); err != nil || status != "failed" {
		t.Fatalf("the store holds %q (%v), want failed", status, err)
	}
}
