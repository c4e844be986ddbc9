package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// TestCrashAfterRefusal: the services are killed with SIGKILL after a branch refused an order (bob
// cannot pay: the saga's debit and the TCC's freeze answer 409), while DTM rolls it back (its first
// compensation or cancel is held), then started again on the same data. DTM finishes the rollback and
// the reconciler settles the initiator's record; the client, which never got an answer, retries its key.
// The refusal is the order's answer: the retry gets 201 with the very order, FAILED, and no second
// order is placed — the initiator's record of a saga that rolled back was FAILED (a key that may run
// again), so the retry placed the order anew (and would have charged bob, had he topped up his
// account in between); so was a TCC's, whose try's refusal was not permanent (found by a defect hunt).
func TestCrashAfterRefusal(t *testing.T) {
	t.Parallel()
	needDTM(t)
	for _, tcc := range []bool{false, true} {
		name, held := "Saga", []string{pathPaymentRefund, pathInventoryRestore}
		if tcc {
			name, held = "TCC", []string{pathPaymentCancel, pathInventoryCancel}
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checkRefusalCrash(t, tcc, held)
		})
	}
}

// checkRefusalCrash runs the scenario of TestCrashAfterRefusal for one kind of order, killing the
// services when DTM calls one of the held rollback paths.
func checkRefusalCrash(t *testing.T, tcc bool, held []string) {
	dir := t.TempDir()
	hold := filepath.Join(t.TempDir(), "hold")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	svc := newChild(t, envTestHold+"="+hold, envTestHoldOnly+"="+strings.Join(held, ","), envPrefix+"DATA_DIR="+dir,
		envPrefix+"WAIT=3s", envPrefix+"RECONCILE_AFTER=4s", envPrefix+"SWEEP_INTERVAL=300ms",
		envPrefix+"RETRY_INTERVAL=1s", envPrefix+"TIMEOUT_TO_FAIL=8s", envPrefix+"LOG_LEVEL=warn")
	svc.start()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newClient(svc.url)
	c.http.Timeout = 10 * time.Second
	const balance, stock = 100, 10
	user := "refused-" + strings.ToLower(orderKind(tcc))
	if err := c.put(ctx, "/api/accounts/"+user, map[string]int64{"balance": balance}); err != nil {
		t.Fatal(err)
	}
	if err := c.put(ctx, "/api/inventory/"+user, map[string]int64{"stock": stock}); err != nil {
		t.Fatal(err)
	}
	req := orderRequest{UserID: user, SKU: user, Qty: 1, Amount: 700} // more than the balance
	key := user + "-" + randomHex(4)
	go func() { _, _ = c.do(ctx, http.MethodPost, orderPath(tcc), key, req) }()
	waitAnyFile(t, seenFile(hold, held[0]), seenFile(hold, held[1])) // refused; DTM is rolling it back
	svc.kill()
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	svc.start()

	var answered created
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r, err := c.do(ctx, http.MethodPost, orderPath(tcc), key, req)
		if err == nil && r.Status == http.StatusCreated {
			if answered, err = r.created(); err != nil {
				t.Fatal(err)
			}
			break
		}
		if err == nil && !r.inFlight() {
			t.Fatalf("retry of %s after the crash: %s", key, r)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer to %s after the crash: last %v %v", key, r, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if o, err := c.settled(ctx, answered.OrderID, time.Minute); err != nil || o.Status != statusFailed {
		t.Errorf("the retry was answered %+v, now %+v, %v; want the refused order, FAILED", answered, o, err)
	}
	svc.kill()

	db, err := gorm.Open(sqlite.Open(filepath.Join(dir, sqliteFile)), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct{ ID, Status string }
	if err := db.Raw("SELECT id, status FROM "+tableOrders+" WHERE user_id = ?", user).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].ID != answered.OrderID || rows[0].Status != statusFailed {
		t.Errorf("orders of %s: %+v; want only the refused one the retry was answered, %s, FAILED", user, rows, answered.OrderID)
	}
	var acct struct{ Balance, Frozen int64 }
	var inv struct{ Stock, Reserved int64 }
	if err := db.Raw("SELECT balance, frozen FROM "+tableAccounts+" WHERE user_id = ?", user).Scan(&acct).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Raw("SELECT stock, reserved FROM "+tableInventory+" WHERE sku = ?", user).Scan(&inv).Error; err != nil {
		t.Fatal(err)
	}
	if acct.Balance != balance || acct.Frozen != 0 || inv.Stock != stock || inv.Reserved != 0 {
		t.Errorf("account %+v, inventory %+v; want nothing moved or held", acct, inv)
	}
}

// orderKind names the endpoint of an order.
func orderKind(tcc bool) string {
	if tcc {
		return "TCC"
	}
	return "saga"
}

// waitAnyFile waits until one of paths exists.
func waitAnyFile(t *testing.T, paths ...string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		for _, p := range paths {
			if _, err := os.Stat(p); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("none of %q appeared", paths)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
