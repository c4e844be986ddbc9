package main

// The services killed with SIGKILL while a global transaction is in flight, then started again on the
// same data: the test binary runs itself in serve mode as a child process (TestMain), so the kill is a
// real one — no deferred function, no graceful stop, the DTM child process killed with it.

import (
	"context"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/txstatus"
)

// Environment of a test binary run as the services.
const (
	envTestServe = "OPI_TEST_SERVE" // "1": run serve mode (configured by IDEMKIT_DEMO_*) instead of the tests
	envTestHold  = "OPI_TEST_HOLD"  // a file: branch calls wait while it exists (see holdBranches)
	// envTestHoldOnly, when set, names the branch paths held (comma-separated); unset, every one is.
	envTestHoldOnly = "OPI_TEST_HOLD_ONLY"
)

func TestMain(m *testing.M) {
	if os.Getenv(envTestServe) == "1" {
		os.Exit(serveForTest())
	}
	os.Exit(m.Run())
}

// serveForTest runs serve mode configured from the environment, its branch calls held by the file
// named in OPI_TEST_HOLD.
func serveForTest() int {
	var cfg Config
	fs := cfg.flagSet("serve", false, nil)
	if err := fs.Parse(nil); err != nil {
		return 2
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	wrap := holdBranches(os.Getenv(envTestHold), os.Getenv(envTestHoldOnly))
	return serve(ctx, cfg, RunOptions{BuildProgress: os.Stderr, Wrap: wrap}, os.Stdout, os.Stderr)
}

// holdBranches makes branch calls (DTM's, and the TCC initiator's tries) wait while the file hold
// exists, and creates seenFile(hold, path) when a call of path arrives. only, when not empty, names the
// paths held (comma-separated); the others pass.
func holdBranches(hold, only string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if hold == "" {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/branch/") && (only == "" || slices.Contains(strings.Split(only, ","), r.URL.Path)) {
				_ = os.WriteFile(seenFile(hold, r.URL.Path), nil, 0o644)
				for {
					if _, err := os.Stat(hold); err != nil {
						break
					}
					select {
					case <-r.Context().Done():
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// seenFile names the file holdBranches creates when a branch call of path arrives.
func seenFile(hold, path string) string { return hold + ".seen" + strings.ReplaceAll(path, "/", "_") }

// child is the services running as a child process.
type child struct {
	t   *testing.T
	env []string
	url string
	cmd *osexec.Cmd
}

// newChild prepares the services on a fixed free loopback port (DTM stores the branch URLs: a
// restarted service must listen where the first one did) with env (IDEMKIT_DEMO_* settings).
func newChild(t *testing.T, env ...string) *child {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c := &child{t: t, url: "http://" + addr}
	c.env = append(os.Environ(), envTestServe+"=1", envPrefix+"LISTEN="+addr)
	c.env = append(c.env, env...)
	t.Cleanup(c.kill)
	return c
}

// start starts the services and waits until they answer.
func (c *child) start() {
	c.t.Helper()
	c.cmd = osexec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = c.env
	c.cmd.Stdout = tLog{c.t}
	c.cmd.Stderr = tLog{c.t}
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(c.url + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the services did not answer on %s: %v", c.url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill kills the services with SIGKILL (and the DTM child process, by its parent-death signal).
func (c *child) kill() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	c.cmd = nil
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCrashAfterSubmit (issue 11, items 1 and 1b): the order service is killed with SIGKILL right
// after it started a saga and a TCC (their first branch call is held), then started again on the same
// data — once on the embedded defaults (SQLite, in-process lock, the DTM child process with its store
// in the data directory) and once on MariaDB, Redis and an external DTM server. The client retries
// both keys until it gets an answer: a 201 naming the order its key created (the saga's very order,
// PAID, once DTM resumed it; for the TCC, whose try never ran, an order created by the retry after
// DTM cancelled the first), money and stock moved once per paid order, nothing left frozen, reserved
// or PENDING, and the replays say the same.
func TestCrashAfterSubmit(t *testing.T) {
	t.Parallel()
	needDTM(t)
	t.Run("Embedded", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		checkCrash(t, dir, nil, func() *gorm.DB {
			db, err := gorm.Open(sqlite.Open(filepath.Join(dir, sqliteFile)), &gorm.Config{Logger: logger.Discard})
			if err != nil {
				t.Fatal(err)
			}
			return db
		})
	})
	t.Run("MariaDBRedisExternalDTM", func(t *testing.T) {
		t.Parallel()
		cfg := mariaDBConfig(t)
		checkCrash(t, t.TempDir(), []string{
			envPrefix + "DB=" + cfg.DB, envPrefix + "REDIS=" + cfg.Redis, envPrefix + "DTM=" + cfg.DTM,
			envPrefix + "TABLE_PREFIX=" + cfg.TablePrefix, envPrefix + "REDIS_PREFIX=" + cfg.RedisPrefix,
		}, func() *gorm.DB { return testsvc.MySQL(t, nil) }, cfg.TablePrefix)
	})
}

// checkCrash runs the crash scenario with the services' data in dir and env, then checks the tables
// through open (and the table prefix, if any).
func checkCrash(t *testing.T, dir string, env []string, open func() *gorm.DB, prefix ...string) {
	hold := filepath.Join(t.TempDir(), "hold")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env = append(env, envTestHold+"="+hold, envPrefix+"DATA_DIR="+dir, envPrefix+"WAIT=3s",
		envPrefix+"RECONCILE_AFTER=4s", envPrefix+"SWEEP_INTERVAL=300ms", envPrefix+"RETRY_INTERVAL=1s",
		envPrefix+"TIMEOUT_TO_FAIL=8s", envPrefix+"LOG_LEVEL=warn")
	svc := newChild(t, env...)
	svc.start()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newClient(svc.url)
	c.http.Timeout = 10 * time.Second
	const balance, stock = 10_000, 100
	for _, u := range []string{"crash-saga", "crash-tcc"} {
		if err := c.put(ctx, "/api/accounts/"+u, map[string]int64{"balance": balance}); err != nil {
			t.Fatal(err)
		}
		if err := c.put(ctx, "/api/inventory/"+u, map[string]int64{"stock": stock}); err != nil {
			t.Fatal(err)
		}
	}
	orders := map[bool]orderRequest{
		false: {UserID: "crash-saga", SKU: "crash-saga", Qty: 2, Amount: 700},
		true:  {UserID: "crash-tcc", SKU: "crash-tcc", Qty: 3, Amount: 900},
	}
	keys := map[bool]string{false: "crash-saga-" + randomHex(4), true: "crash-tcc-" + randomHex(4)}
	first := map[bool]string{false: pathInventoryDeduct, true: pathInventoryReserve}
	for _, tcc := range []bool{false, true} {
		go func() { _, _ = c.do(ctx, http.MethodPost, orderPath(tcc), keys[tcc], orders[tcc]) }()
		waitFile(t, seenFile(hold, first[tcc])) // its transaction is at DTM (saga) or in its first try (TCC)
	}
	svc.kill()
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	svc.start()

	answered := map[bool]created{}
	for _, tcc := range []bool{false, true} {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			r, err := c.do(ctx, http.MethodPost, orderPath(tcc), keys[tcc], orders[tcc])
			if err == nil && r.Status == http.StatusCreated {
				if answered[tcc], err = r.created(); err != nil {
					t.Fatal(err)
				}
				break
			}
			if err == nil && !r.inFlight() {
				t.Fatalf("retry of %s after the crash: %s", keys[tcc], r)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no answer to %s after the crash: last %v %v", keys[tcc], r, err)
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	for _, tcc := range []bool{false, true} {
		a := answered[tcc]
		o, err := c.settled(ctx, a.OrderID, time.Minute)
		if err != nil || o.Status != statusPaid || o.UserID != orders[tcc].UserID {
			t.Fatalf("order %+v answered for %s: now %+v, %v; want it PAID", a, keys[tcc], o, err)
		}
		r, err := c.do(ctx, http.MethodPost, orderPath(tcc), keys[tcc], orders[tcc])
		if err != nil {
			t.Fatal(err)
		}
		if again, err := r.created(); err != nil || again.OrderID != a.OrderID {
			t.Fatalf("replay of %s: %s; want order %s", keys[tcc], r, a.OrderID)
		}
	}
	waitNoPending(t, ctx, c, svc)
	svc.kill()

	db := open()
	p := strings.Join(prefix, "")
	for _, tcc := range []bool{false, true} {
		req := orders[tcc]
		var rows []struct{ ID, Status string }
		if err := db.Raw("SELECT id, status FROM "+p+tableOrders+" WHERE user_id = ?", req.UserID).Scan(&rows).Error; err != nil {
			t.Fatal(err)
		}
		paid := 0
		for _, o := range rows {
			switch o.Status {
			case statusPaid:
				paid++
				if o.ID != answered[tcc].OrderID {
					t.Errorf("%s: order %s PAID, but the client was answered %s", req.UserID, o.ID, answered[tcc].OrderID)
				}
			case statusFailed:
			default:
				t.Errorf("%s: order %s left %s", req.UserID, o.ID, o.Status)
			}
		}
		if paid != 1 || (!tcc && len(rows) != 1) {
			t.Errorf("%s: orders %+v; want exactly one PAID (and, for the saga, no other)", req.UserID, rows)
		}
		var acct struct{ Balance, Frozen int64 }
		var inv struct{ Stock, Reserved int64 }
		if err := db.Raw("SELECT balance, frozen FROM "+p+tableAccounts+" WHERE user_id = ?", req.UserID).Scan(&acct).Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Raw("SELECT stock, reserved FROM "+p+tableInventory+" WHERE sku = ?", req.SKU).Scan(&inv).Error; err != nil {
			t.Fatal(err)
		}
		if acct.Balance != balance-req.Amount || acct.Frozen != 0 || inv.Stock != stock-req.Qty || inv.Reserved != 0 {
			t.Errorf("%s: account %+v, inventory %+v; want one order's money and stock moved, nothing held", req.UserID, acct, inv)
		}
	}
}

// waitNoPending waits until the reconciler settled the two transactions the killed process left (the
// saga, and the first TCC once DTM cancelled it), as GET /healthz counts them, and fails on any retry
// that could not find its order.
func waitNoPending(t *testing.T, ctx context.Context, c *client, svc *child) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var h health
	for time.Now().Before(deadline) {
		if err := c.getJSON(ctx, "/healthz", &h); err != nil {
			t.Fatal(err)
		}
		if h.UnreadableResults != 0 {
			t.Fatalf("%d retries could not find their order", h.UnreadableResults)
		}
		if h.Reconciler.Settled >= 2 { // the saga and the first TCC, both left by the killed process
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the reconciler did not settle the killed process's transactions on %s: %+v", svc.url, h)
}

// TestReplayWithoutResult (issue 11, item 1): an initiator record settled SUCCEEDED without the
// initiator's result (as an older version's reconciler left them) must not turn every retry into a
// 500: the retry finds the order by the record's gid and answers 201 with it. A record whose order
// cannot be found at all is answered 500 — logged at error level and counted in /healthz, never
// silently — and the retry does not create a second order.
func TestReplayWithoutResult(t *testing.T) {
	t.Parallel()
	needDTM(t)
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	svc := startServices(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(svc.URL)
	guard := svc.orders.sagas.Lifecycle.Guard
	// settledWithoutResult leaves a SUCCEEDED initiator record for key, tied to gid, with no result.
	settledWithoutResult := func(key, gid string) {
		t.Helper()
		cl, _, err := guard.Begin(ctx, idemkit.Call{Scope: scopeSaga, Key: key, GID: gid})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Finish(ctx, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	body := orderRequest{UserID: "old", SKU: "old", Qty: 1, Amount: 100}

	// The order exists under the record's gid: the retry answers with it.
	gid := txstatus.NewGID()
	if err := svc.db.db.Exec("INSERT INTO "+svc.db.tables.orders+" (id, user_id, sku, qty, amount, status, gid, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
		"ord_old", "old", "old", 1, 100, statusPaid, gid, time.Now().UTC()).Error; err != nil {
		t.Fatal(err)
	}
	settledWithoutResult("old-key", gid)
	r, err := c.do(ctx, http.MethodPost, "/api/orders", "old-key", body)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.created(); err != nil || got.OrderID != "ord_old" || got.Status != statusPaid || got.GID != gid {
		t.Fatalf("retry of a record without its result: %s", r)
	}

	// No order carries the record's gid: 500, loudly, and no new order.
	settledWithoutResult("lost-key", txstatus.NewGID())
	for range 2 {
		r, err := c.do(ctx, http.MethodPost, "/api/orders", "lost-key", body)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusInternalServerError {
			t.Fatalf("retry of a record whose order is gone: %s", r)
		}
	}
	var h health
	if err := c.getJSON(ctx, "/healthz", &h); err != nil || h.UnreadableResults != 2 {
		t.Fatalf("/healthz %+v, %v; want 2 unreadable results counted", h, err)
	}
	var n int64
	if err := svc.db.db.Raw("SELECT COUNT(*) FROM " + svc.db.tables.orders).Scan(&n).Error; err != nil || n != 1 {
		t.Fatalf("%d orders, %v; want only the planted one", n, err)
	}
}
