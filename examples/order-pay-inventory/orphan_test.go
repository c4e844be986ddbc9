package main

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/txstatus"
)

// TestNeverStartedOrderIsSettled: an order whose transaction never started (DTM's gateway answered
// 502 when the initiator asked again, once the Before hook had inserted the order, whether the order's
// gid was free) and whose Rollback hook failed then (the orders table busy). Package hooks rolls the record back all the same (the gid was chosen up
// front) and the client gets 503; nothing ever ran the hook again, and the order stayed PENDING for
// ever. The sweeper's orphan task fences the gid at DTM and leaves the order FAILED.
func TestNeverStartedOrderIsSettled(t *testing.T) {
	needDTM(t)
	srv := dtmserver.StartT(t)
	// The first question whether the gid is free is answered (free: the Before hook inserts the
	// order), the second, right before the start, meets the gateway's 502 while down is set.
	var down atomic.Bool
	var queries atomic.Int32
	dtmURL := gatewayFailing(t, srv.URL(), func(r *http.Request) bool {
		return down.Load() && strings.HasSuffix(r.URL.Path, "/query") && queries.Add(1) > 1
	})
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	cfg.DTM = dtmURL
	svc := startServices(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(svc.URL)
	if err := c.put(ctx, "/api/accounts/orphan", map[string]int64{"balance": 10_000}); err != nil {
		t.Fatal(err)
	}
	if err := c.put(ctx, "/api/inventory/orphansku", map[string]int64{"stock": 10}); err != nil {
		t.Fatal(err)
	}
	orders := svc.db.tables.orders
	if err := svc.db.db.Exec("CREATE TRIGGER orphan_busy BEFORE UPDATE OF status ON " + orders +
		" WHEN NEW.status = 'FAILED' BEGIN SELECT RAISE(ABORT, 'orders table busy'); END").Error; err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	r, err := c.do(ctx, http.MethodPost, "/api/orders", "orphan-key", orderRequest{UserID: "orphan", SKU: "orphansku", Qty: 1, Amount: 100})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("answer %d %s; want 503: the order could not be started", r.Status, r.Body)
	}
	down.Store(false)
	if err := svc.db.db.Exec("DROP TRIGGER orphan_busy").Error; err != nil {
		t.Fatal(err)
	}
	var ids []string
	if err := svc.db.db.Raw("SELECT id FROM " + orders + " WHERE user_id = 'orphan'").Scan(&ids).Error; err != nil || len(ids) != 1 {
		t.Fatalf("orders %v, %v; want the one order inserted", ids, err)
	}
	// Past ReconcileAfter (5s), the sweeper (every 500ms) settles it.
	o, err := c.settled(ctx, ids[0], 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != statusFailed {
		t.Fatalf("order %s is %s; want FAILED: its transaction never started, and nothing settles it but the sweeper", o.OrderID, o.Status)
	}
	// Its gid is fenced: DTM holds it failed, so it can never start.
	st, err := newStatusClient(srv.URL()).Status(ctx, o.GID)
	if err != nil || st != txstatus.Failed {
		t.Fatalf("DTM status of %s: %s, %v; want failed (fenced)", o.GID, st, err)
	}
}

// TestOrphanOrderSettledMariaDB: on MariaDB + Redis + DTM, an order PENDING past ReconcileAfter whose
// gid is on no record (its record settled without it) is fenced and left FAILED, while one whose gid a
// PROCESSING record still carries (an initiator or the reconciler still settles it) is not touched:
// its gid is not fenced.
func TestOrphanOrderSettledMariaDB(t *testing.T) {
	needDTM(t)
	cfg := mariaDBConfig(t)
	svc := startServices(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	guard, err := idemkit.New(svc.store, nil)
	if err != nil {
		t.Fatal(err)
	}
	held := txstatus.NewGID()
	cl, _, err := guard.Begin(ctx, idemkit.Call{Scope: "orphan-test", Key: "held", GID: held})
	if err != nil || cl == nil {
		t.Fatalf("claiming a record with %s: %v", held, err)
	}
	orphan := txstatus.NewGID()
	old := time.Now().Add(-time.Minute).UTC()
	for _, o := range []struct{ id, gid string }{{"ord_orphan", orphan}, {"ord_held", held}} {
		if err := svc.db.db.Exec("INSERT INTO "+svc.db.tables.orders+" (id, user_id, sku, qty, amount, status, gid, created_at) VALUES (?, 'u', 's', 1, 1, ?, ?, ?)",
			o.id, statusPending, o.gid, old).Error; err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(svc.URL)
	o, err := c.settled(ctx, "ord_orphan", 15*time.Second)
	if err != nil || o.Status != statusFailed {
		t.Fatalf("orphan order %+v, %v; want FAILED", o, err)
	}
	st, err := newStatusClient(svc.dtm.url).Status(ctx, orphan)
	if err != nil || st != txstatus.Failed {
		t.Fatalf("DTM status of the orphan's gid: %s, %v; want failed (fenced)", st, err)
	}
	// The sweeper passed (it settled the orphan); another pass, and the held order is untouched.
	time.Sleep(2 * cfg.SweepInterval)
	if h, err := c.order(ctx, "ord_held"); err != nil || h.Status != statusPending {
		t.Fatalf("held order %+v, %v; want PENDING: its record is PROCESSING", h, err)
	}
	if st, err := newStatusClient(svc.dtm.url).Status(ctx, held); err != nil || st != txstatus.Unknown {
		t.Fatalf("DTM status of the held gid: %s, %v; want none: not fenced", st, err)
	}
}
