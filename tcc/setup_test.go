package tcc_test

// The harness of the end-to-end tests: one real DTM server for the package (internal/dtmserver), and per
// test a transfer between an account on MariaDB (gorm barrier) and one on Redis (Redis barrier), with
// try/confirm/cancel handlers from tcc.Try/Confirm/Cancel, and a Global whose record lives on MariaDB
// behind a Redis Locker.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
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
	"github.com/idemkit/idemkit/tcc"
	"github.com/idemkit/idemkit/txstatus"
)

var ctxb = context.Background()

// settleTimeout bounds every wait for DTM; no test asserts how long anything took.
const settleTimeout = 30 * time.Second

const (
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

type transfer struct {
	Amount int `json:"amount"`
}

// Lua bodies of the Redis account (a hash with balance, trading and frozen).
var (
	redisTry = barrier.NewScript(`
if redis.call('HGET', KEYS[1], 'frozen') == '1' then return redis.error_reply('FAILURE: account frozen') end
return redis.call('HINCRBY', KEYS[1], 'trading', ARGV[1])`)
	redisConfirm = barrier.NewScript(`
redis.call('HINCRBY', KEYS[1], 'trading', -tonumber(ARGV[1]))
return redis.call('HINCRBY', KEYS[1], 'balance', ARGV[1])`)
	redisCancel = barrier.NewScript(`
return redis.call('HINCRBY', KEYS[1], 'trading', -tonumber(ARGV[1]))`)
)

// bank is one test's world: account "out" on MariaDB, account "in" on Redis.
type bank struct {
	srv    *dtmserver.Server
	db     *gorm.DB
	rdb    *redis.Client
	accts  string
	inKey  string
	guard  *idemkit.Guard
	opts   idemkit.Options // the Guard's options (a test builds another Guard with a custom classifier)
	store  *record.Store
	global *tcc.Global
	svc    *httptest.Server

	// gate, when set, is called before the MariaDB try runs (a test holds it there).
	gate func()

	mu      sync.Mutex
	events  []dtmhttp.Event
	tryRuns int // runs of the MariaDB try
}

func newBank(t *testing.T) *bank {
	t.Helper()
	k := &bank{srv: server(t), db: testsvc.MySQL(t, nil), rdb: testsvc.Redis(t)}
	k.accts = testsvc.Name("acct_")
	testsvc.DropTable(t, k.db, k.accts)
	for _, q := range []string{
		"CREATE TABLE " + k.accts + " (id int PRIMARY KEY, balance int NOT NULL, trading int NOT NULL DEFAULT 0)",
		fmt.Sprintf("INSERT INTO %s (id, balance) VALUES (1, %d)", k.accts, initBalance),
	} {
		if err := k.db.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	tag := testsvc.Name("tcc-")
	testsvc.CleanRedis(t, k.rdb, "{"+tag+"}")
	k.inKey = "{" + tag + "}:acct"
	if err := k.rdb.HSet(ctxb, k.inKey, "balance", initBalance, "trading", 0, "frozen", 0).Err(); err != nil {
		t.Fatal(err)
	}

	barTable := testsvc.Name("bar_")
	testsvc.DropTable(t, k.db, barTable)
	gbar, err := barrier.NewGorm(k.db, &barrier.GormOptions{Table: barTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := gbar.CreateTable(ctxb); err != nil {
		t.Fatal(err)
	}
	rbar, err := barrier.NewRedis(k.rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	recTable := testsvc.Name("rec_")
	testsvc.DropTable(t, k.db, recTable)
	store, err := record.New(k.db, &record.Options{Table: recTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateTable(ctxb); err != nil {
		t.Fatal(err)
	}
	prefix := testsvc.Name("idemkit_tcc_") + ":"
	testsvc.CleanRedis(t, k.rdb, prefix)
	locker := lock.New(k.rdb, &lock.Options{Prefix: prefix})
	k.store, k.opts = store, idemkit.Options{Locker: locker, Lease: 5 * time.Second}
	if k.guard, err = idemkit.New(store, &k.opts); err != nil {
		t.Fatal(err)
	}
	k.global = &tcc.Global{
		Server:    k.srv.URL(),
		Lifecycle: &hooks.Lifecycle{Guard: k.guard},
		Wait:      settleTimeout,
		Status:    &txstatus.Client{Server: k.srv.URL(), PollInterval: 50 * time.Millisecond},
	}
	branches, err := dtmhttp.New(&dtmhttp.Options{Locker: locker, Observe: k.observe})
	if err != nil {
		t.Fatal(err)
	}

	sql := func(q string, check bool) dtmhttp.GormFunc[transfer] {
		return func(ctx context.Context, tx *gorm.DB, p transfer) error {
			res := tx.Exec(q, p.Amount, p.Amount)
			if res.Error != nil {
				return res.Error
			}
			if check && res.RowsAffected == 0 {
				return idemkit.Permanent(errors.New("balance too low"))
			}
			return nil
		}
	}
	outTry := sql("UPDATE "+k.accts+" SET trading = trading - ? WHERE id = 1 AND balance + trading - ? >= 0", true)
	redisOp := func(s *barrier.Script) dtmhttp.Business {
		return dtmhttp.Redis(rbar, func(ctx context.Context, p transfer) (*barrier.RedisCall, error) {
			return &barrier.RedisCall{Script: s, Keys: []string{k.inKey}, Args: []any{p.Amount}}, nil
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/OutTry", tcc.Try(branches, dtmhttp.Gorm(gbar, func(ctx context.Context, tx *gorm.DB, p transfer) error {
		k.mu.Lock()
		k.tryRuns++
		gate := k.gate
		k.mu.Unlock()
		if gate != nil {
			gate()
		}
		return outTry(ctx, tx, p)
	})))
	mux.Handle("/OutConfirm", tcc.Confirm(branches, dtmhttp.Gorm(gbar, sql("UPDATE "+k.accts+" SET trading = trading + ?, balance = balance - ? WHERE id = 1", false))))
	mux.Handle("/OutCancel", tcc.Cancel(branches, dtmhttp.Gorm(gbar, func(ctx context.Context, tx *gorm.DB, p transfer) error {
		return tx.Exec("UPDATE "+k.accts+" SET trading = trading + ? WHERE id = 1", p.Amount).Error
	})))
	mux.Handle("/InTry", tcc.Try(branches, redisOp(redisTry)))
	mux.Handle("/InConfirm", tcc.Confirm(branches, redisOp(redisConfirm)))
	mux.Handle("/InCancel", tcc.Cancel(branches, redisOp(redisCancel)))
	k.svc = httptest.NewServer(mux)
	t.Cleanup(k.svc.Close)
	return k
}

// runParams is a transfer of amount from "out" to "in" under c.
func (k *bank) runParams(c idemkit.Call) tcc.RunParams {
	return tcc.RunParams{
		Call:    c,
		Result:  []byte(`{"transfer":"done"}`),
		Options: func(t *dtmcli.Tcc) { t.RetryInterval = 1 },
		Tries: func(t *dtmcli.Tcc) error {
			p := &transfer{Amount: amount}
			if _, err := t.CallBranch(p, k.svc.URL+"/OutTry", k.svc.URL+"/OutConfirm", k.svc.URL+"/OutCancel"); err != nil {
				return err
			}
			_, err := t.CallBranch(p, k.svc.URL+"/InTry", k.svc.URL+"/InConfirm", k.svc.URL+"/InCancel")
			return err
		},
	}
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

func (k *bank) expectEvents(t *testing.T, gid string, want ...string) {
	t.Helper()
	got := k.eventsOf(gid)
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Fatalf("branch calls of %s: %q lack %q", gid, got, w)
		}
	}
}

func (k *bank) tryCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tryRuns
}

// checkBalances compares both accounts with initBalance moved by moved and nothing reserved.
func (k *bank) checkBalances(t *testing.T, moved int) {
	t.Helper()
	var out struct{ Balance, Trading int }
	if err := k.db.Raw("SELECT balance, trading FROM " + k.accts + " WHERE id = 1").Scan(&out).Error; err != nil {
		t.Fatal(err)
	}
	in, err := k.rdb.HMGet(ctxb, k.inKey, "balance", "trading").Result()
	if err != nil {
		t.Fatal(err)
	}
	if out.Balance != initBalance-moved || out.Trading != 0 || fmt.Sprint(in) != fmt.Sprint([]any{fmt.Sprint(initBalance + moved), "0"}) {
		t.Fatalf("out %+v, in %v; want %d moved and nothing reserved", out, in, moved)
	}
}

func (k *bank) record(t *testing.T, c idemkit.Call) *idemkit.Record {
	t.Helper()
	rec, err := k.guard.Get(ctxb, c.Scope, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func newCall() idemkit.Call {
	return idemkit.Call{Scope: "POST /transfers", Key: testsvc.Name("key-")}
}

// waitTrans polls the query API until gid reaches a final status, at most settleTimeout.
func waitTrans(t *testing.T, srv *dtmserver.Server, gid string) *dtmserver.Trans {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for {
		tr, err := srv.Query(ctxb, gid)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Status == dtmcli.StatusSucceed || tr.Status == dtmcli.StatusFailed {
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("transaction %s still %q", gid, tr.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
