package saga_test

// The harness of the end-to-end tests: one real DTM server for the package (internal/dtmserver), and per
// test a bank on MariaDB (two accounts, a barrier table, an orders table the user hooks keep, the
// idempotency record table), a Redis Locker with its own prefix, and an HTTP service whose saga steps
// are saga.Action / saga.Compensate handlers.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

var ctxb = context.Background()

// settleTimeout bounds every wait for DTM; no test asserts how long anything took.
const settleTimeout = 30 * time.Second

const (
	transOut    = 1
	transIn     = 2
	initBalance = 10000
	amount      = 30
)

// shared is the package's DTM server, started on first use and stopped by TestMain.
var shared = dtmserver.Shared{Env: []string{"LOG_LEVEL=warn"}}

func TestMain(m *testing.M) {
	code := m.Run()
	_ = shared.Stop()
	os.Exit(code)
}

// server returns the shared DTM server (see dtmserver.Shared.Get).
func server(t *testing.T) *dtmserver.Server { return shared.Get(t) }

// transfer is the payload of every step.
type transfer struct {
	Amount int `json:"amount"`
}

// bank is one test's world.
type bank struct {
	srv    *dtmserver.Server
	db     *gorm.DB
	rdb    *redis.Client
	accts  string
	orders string
	store  *record.Store
	guard  *idemkit.Guard
	locker *lock.Locker
	steps  *dtmhttp.Branches
	lc     *hooks.Lifecycle
	init   *saga.Initiator
	svc    *httptest.Server

	mu     sync.Mutex
	events []dtmhttp.Event
	runs   map[string]int // path → business runs that reached the database
}

// newBank builds a bank on MariaDB opened with cfg (nil for the default).
func newBank(t *testing.T, cfg *gorm.Config) *bank {
	t.Helper()
	k := &bank{srv: server(t), db: testsvc.MySQL(t, cfg), rdb: testsvc.Redis(t), runs: map[string]int{}}
	exec := func(sql string, args ...any) {
		t.Helper()
		if err := k.db.Exec(sql, args...).Error; err != nil {
			t.Fatal(err)
		}
	}
	k.accts = testsvc.Name("acct_")
	testsvc.DropTable(t, k.db, k.accts)
	exec("CREATE TABLE " + k.accts + " (id int PRIMARY KEY, balance int NOT NULL, frozen int NOT NULL DEFAULT 0)")
	exec("INSERT INTO "+k.accts+" (id, balance) VALUES (?, ?), (?, ?)", transOut, initBalance, transIn, initBalance)
	k.orders = testsvc.Name("orders_")
	testsvc.DropTable(t, k.db, k.orders)
	exec("CREATE TABLE " + k.orders + " (gid varchar(128) PRIMARY KEY, idem_key varchar(128) NOT NULL, status varchar(16) NOT NULL)")

	barTable := testsvc.Name("bar_")
	testsvc.DropTable(t, k.db, barTable)
	bar, err := barrier.NewGorm(k.db, &barrier.GormOptions{Table: barTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := bar.CreateTable(ctxb); err != nil {
		t.Fatal(err)
	}
	recTable := testsvc.Name("rec_")
	testsvc.DropTable(t, k.db, recTable)
	if k.store, err = record.New(k.db, &record.Options{Table: recTable}); err != nil {
		t.Fatal(err)
	}
	if err := k.store.CreateTable(ctxb); err != nil {
		t.Fatal(err)
	}

	prefix := testsvc.Name("idemkit_saga_") + ":"
	testsvc.CleanRedis(t, k.rdb, prefix)
	k.locker = lock.New(k.rdb, &lock.Options{Prefix: prefix})
	if k.guard, err = idemkit.New(k.store, &idemkit.Options{Locker: k.locker, Lease: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if k.steps, err = dtmhttp.New(&dtmhttp.Options{Locker: k.locker, Observe: k.observe}); err != nil {
		t.Fatal(err)
	}

	// The user hooks keep an orders table in step with the global transaction.
	k.lc = &hooks.Lifecycle{
		Guard: k.guard,
		Before: hooks.BeforeTransactionFunc(func(ctx context.Context, tx *hooks.Txn) error {
			return k.db.WithContext(ctx).Exec("INSERT INTO "+k.orders+" (gid, idem_key, status) VALUES (?, ?, 'PENDING')", tx.GID, tx.Record.Key).Error
		}),
		OnCommit: hooks.CommitFunc(func(ctx context.Context, tx *hooks.Txn, _ []byte) error {
			return k.db.WithContext(ctx).Exec("UPDATE "+k.orders+" SET status = 'PAID' WHERE gid = ?", tx.GID).Error
		}),
		OnRollback: hooks.RollbackFunc(func(ctx context.Context, tx *hooks.Txn, _ error) error {
			return k.db.WithContext(ctx).Exec("UPDATE "+k.orders+" SET status = 'CANCELLED' WHERE gid = ?", tx.GID).Error
		}),
	}
	k.init = &saga.Initiator{
		Server:    k.srv.URL(),
		Lifecycle: k.lc,
		Wait:      settleTimeout,
		Status:    &txstatus.Client{Server: k.srv.URL(), PollInterval: 50 * time.Millisecond},
	}

	mux := http.NewServeMux()
	for path, h := range map[string]http.Handler{
		"/TransOut":           saga.Action(k.steps, dtmhttp.Gorm(bar, k.adjust("/TransOut", transOut, -1, true))),
		"/TransOutCompensate": saga.Compensate(k.steps, dtmhttp.Gorm(bar, k.adjust("/TransOutCompensate", transOut, +1, false))),
		"/TransIn":            saga.Action(k.steps, dtmhttp.Gorm(bar, k.adjust("/TransIn", transIn, +1, true))),
		"/TransInCompensate":  saga.Compensate(k.steps, dtmhttp.Gorm(bar, k.adjust("/TransInCompensate", transIn, -1, false))),
	} {
		mux.Handle(path, h)
	}
	k.svc = httptest.NewServer(mux)
	t.Cleanup(k.svc.Close)
	return k
}

// adjust moves amount on account uid; an action refuses (permanently) when the account is frozen or
// the balance would go negative. Compensations never refuse.
func (k *bank) adjust(path string, uid, sign int, action bool) dtmhttp.GormFunc[transfer] {
	return func(ctx context.Context, tx *gorm.DB, p transfer) error {
		k.mu.Lock()
		k.runs[path]++
		k.mu.Unlock()
		delta := sign * p.Amount
		q, args := "UPDATE "+k.accts+" SET balance = balance + ? WHERE id = ?", []any{delta, uid}
		if action {
			q, args = q+" AND frozen = 0 AND balance + ? >= 0", append(args, delta)
		}
		res := tx.Exec(q, args...)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return idemkit.Permanent(fmt.Errorf("account %d frozen or balance too low", uid))
		}
		return nil
	}
}

// steps adds the two saga steps to s, retrying every second.
func (k *bank) addSteps(s *dtmcli.Saga) {
	s.RetryInterval = 1
	s.Add(k.svc.URL+"/TransOut", k.svc.URL+"/TransOutCompensate", &transfer{Amount: amount}).
		Add(k.svc.URL+"/TransIn", k.svc.URL+"/TransInCompensate", &transfer{Amount: amount})
}

func (k *bank) observe(_ context.Context, e *dtmhttp.Event) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.events = append(k.events, *e)
}

// eventsOf lists "branch op:status:outcome" for gid's branch calls so far.
func (k *bank) eventsOf(gid string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, e := range k.events {
		if e.GID == gid {
			o := "-"
			if e.Outcome != 0 {
				o = e.Outcome.String()
			}
			out = append(out, fmt.Sprintf("%s %s:%d:%s", e.BranchID, e.Op, e.Status, o))
		}
	}
	return out
}

func (k *bank) count(gid, event string) int {
	n := 0
	for _, e := range k.eventsOf(gid) {
		if e == event {
			n++
		}
	}
	return n
}

func (k *bank) runsOf(path string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.runs[path]
}

func (k *bank) setFrozen(t *testing.T, uid int, frozen bool) {
	t.Helper()
	v := 0
	if frozen {
		v = 1
	}
	if err := k.db.Exec("UPDATE "+k.accts+" SET frozen = ? WHERE id = ?", v, uid).Error; err != nil {
		t.Fatal(err)
	}
}

// checkBalances compares both balances with initBalance moved by moved.
func (k *bank) checkBalances(t *testing.T, moved int) {
	t.Helper()
	var rows []struct{ ID, Balance int }
	if err := k.db.Raw("SELECT id, balance FROM " + k.accts + " ORDER BY id").Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Balance != initBalance-moved || rows[1].Balance != initBalance+moved {
		t.Fatalf("balances %+v, want %d moved", rows, moved)
	}
}

func (k *bank) orderStatus(t *testing.T, gid string) string {
	t.Helper()
	var st string
	if err := k.db.Raw("SELECT status FROM "+k.orders+" WHERE gid = ?", gid).Scan(&st).Error; err != nil {
		t.Fatal(err)
	}
	return st
}

func (k *bank) record(t *testing.T, c idemkit.Call) *idemkit.Record {
	t.Helper()
	rec, err := k.guard.Get(ctxb, c.Scope, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// holdLock takes the step handlers' lock of (gid, branchID, op) as a concurrent delivery would, and
// returns its release.
func (k *bank) holdLock(t *testing.T, gid, branchID, op string) (release func()) {
	t.Helper()
	key := k.steps.LockKey(gid, branchID, op)
	if _, err := k.locker.Acquire(ctxb, key, "test-redelivery", time.Minute); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := k.locker.Release(ctxb, key, "test-redelivery", nil, 0); err != nil {
			t.Errorf("releasing %s: %v", key, err)
		}
	}
}

// waitTrans polls the query API until gid reaches a final status, at most settleTimeout.
func waitTrans(t *testing.T, srv *dtmserver.Server, gid string) *dtmserver.Trans {
	t.Helper()
	var tr *dtmserver.Trans
	waitFor(t, "transaction "+gid+" to finish", func() bool {
		var err error
		if tr, err = srv.Query(ctxb, gid); err != nil {
			t.Fatal(err)
		}
		return tr.Status == dtmcli.StatusSucceed || tr.Status == dtmcli.StatusFailed
	})
	return tr
}

// waitFor polls cond every 50ms, failing t after settleTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func newCall() idemkit.Call {
	return idemkit.Call{Scope: "POST /transfers", Key: testsvc.Name("key-")}
}

// committingInitiator returns a copy of k's initiator whose Lifecycle has no Before hook (the
// harness's inserts the order row keyed by gid) and records the gids its commit hook ran for.
func (k *bank) committingInitiator() (*saga.Initiator, *[]string) {
	lc := *k.lc
	lc.Before = nil
	var committed []string
	lc.OnCommit = hooks.CommitFunc(func(_ context.Context, t *hooks.Txn, _ []byte) error {
		committed = append(committed, t.GID)
		return nil
	})
	init := *k.init
	init.Lifecycle = &lc
	return &init, &committed
}
