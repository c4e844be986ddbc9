package cluster_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/cluster"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/sweep"
	"github.com/idemkit/idemkit/tcc"
	"github.com/idemkit/idemkit/txstatus"
)

// shop is the business of the DTM tests: orders paid from accounts and served from stock, by a saga
// (debit + deduct, compensated by refund + restore) or a TCC (freeze + reserve, then confirm or
// cancel). Every branch runs behind the gorm branch barrier in one local transaction.
type shop struct {
	db      *gorm.DB
	users   map[string]int64
	skus    map[string]int64
	store   *record.Store
	url     string // the branch server
	timeout int64  // TCC TimeoutToFail, seconds
}

// move is every branch's payload.
type move struct {
	Order  string `json:"order"`
	User   string `json:"user"`
	SKU    string `json:"sku"`
	Qty    int64  `json:"qty"`
	Amount int64  `json:"amount"`
}

var errRefused = errors.New("refused")

func (s *shop) create(t *testing.T) {
	t.Helper()
	for _, q := range []string{
		"CREATE TABLE accounts (user_id VARCHAR(32) PRIMARY KEY, balance BIGINT NOT NULL, frozen BIGINT NOT NULL DEFAULT 0)",
		"CREATE TABLE stock (sku VARCHAR(32) PRIMARY KEY, stock BIGINT NOT NULL, reserved BIGINT NOT NULL DEFAULT 0)",
		// No unique key on k: at most one paid order per key is idemkit's promise, not the schema's.
		"CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, k VARCHAR(64) NOT NULL, user_id VARCHAR(32) NOT NULL, sku VARCHAR(32) NOT NULL, " +
			"qty BIGINT NOT NULL, amount BIGINT NOT NULL, status VARCHAR(16) NOT NULL, gid VARCHAR(128) NOT NULL, seq BIGINT AUTO_INCREMENT UNIQUE, KEY (gid))",
	} {
		must(t, s.db.Exec(q).Error)
	}
	for u, b := range s.users {
		must(t, s.db.Exec("INSERT INTO accounts (user_id, balance) VALUES (?, ?)", u, b).Error)
	}
	for k, n := range s.skus {
		must(t, s.db.Exec("INSERT INTO stock (sku, stock) VALUES (?, ?)", k, n).Error)
	}
}

// change runs an UPDATE that must change one row; refuse says what it means when it changes none.
func change(ctx context.Context, tx *gorm.DB, refuse error, q string, args ...any) error {
	time.Sleep(10 * time.Millisecond) // a business that takes a moment, so transactions overlap the kill
	r := tx.WithContext(ctx).Exec(q, args...)
	switch {
	case r.Error != nil:
		return r.Error
	case r.RowsAffected == 1:
		return nil
	case refuse != nil:
		return idemkit.Permanent(refuse)
	}
	return fmt.Errorf("%s %v changed no row", q, args)
}

// routes mounts the branch handlers on mux.
func (s *shop) routes(t *testing.T, bar *barrier.Gorm, mux *http.ServeMux) {
	b, err := dtmhttp.New(nil)
	must(t, err)
	g := func(f func(ctx context.Context, tx *gorm.DB, m move) error) dtmhttp.Business {
		return dtmhttp.Gorm(bar, f)
	}
	h := map[string]http.Handler{
		"/pay/debit": saga.Action(b, g(func(ctx context.Context, tx *gorm.DB, m move) error {
			return change(ctx, tx, errRefused, "UPDATE accounts SET balance = balance - ? WHERE user_id = ? AND balance >= ?", m.Amount, m.User, m.Amount)
		})),
		"/pay/refund": saga.Compensate(b, g(func(ctx context.Context, tx *gorm.DB, m move) error {
			return change(ctx, tx, nil, "UPDATE accounts SET balance = balance + ? WHERE user_id = ?", m.Amount, m.User)
		})),
		"/inv/deduct": saga.Action(b, g(func(ctx context.Context, tx *gorm.DB, m move) error {
			return change(ctx, tx, errRefused, "UPDATE stock SET stock = stock - ? WHERE sku = ? AND stock >= ?", m.Qty, m.SKU, m.Qty)
		})),
		"/inv/restore": saga.Compensate(b, g(func(ctx context.Context, tx *gorm.DB, m move) error {
			return change(ctx, tx, nil, "UPDATE stock SET stock = stock + ? WHERE sku = ?", m.Qty, m.SKU)
		})),
		"/pay/freeze": tcc.Try(b, g(func(ctx context.Context, tx *gorm.DB, m move) error {
			return change(ctx, tx, errRefused, "UPDATE accounts SET balance = balance - ?, frozen = frozen + ? WHERE user_id = ? AND balance >= ?", m.Amount, m.Amount, m.User, m.Amount)
		})),
		"/pay/confirm": tcc.Confirm(b, g(func(ctx context.Context, tx *gorm.DB, m move) error {
			return change(ctx, tx, nil, "UPDATE accounts SET frozen = frozen - ? WHERE user_id = ?", m.Amount, m.User)
		})),
		"/pay/cancel": tcc.Cancel(b, g(func(ctx context.Context, tx *gorm.DB, m move) error {
			return change(ctx, tx, nil, "UPDATE accounts SET balance = balance + ?, frozen = frozen - ? WHERE user_id = ?", m.Amount, m.Amount, m.User)
		})),
		"/inv/reserve": tcc.Try(b, g(func(ctx context.Context, tx *gorm.DB, m move) error {
			return change(ctx, tx, errRefused, "UPDATE stock SET stock = stock - ?, reserved = reserved + ? WHERE sku = ? AND stock >= ?", m.Qty, m.Qty, m.SKU, m.Qty)
		})),
		"/inv/confirm": tcc.Confirm(b, g(func(ctx context.Context, tx *gorm.DB, m move) error {
			return change(ctx, tx, nil, "UPDATE stock SET reserved = reserved - ? WHERE sku = ?", m.Qty, m.SKU)
		})),
		"/inv/cancel": tcc.Cancel(b, g(func(ctx context.Context, tx *gorm.DB, m move) error {
			return change(ctx, tx, nil, "UPDATE stock SET stock = stock + ?, reserved = reserved - ? WHERE sku = ?", m.Qty, m.Qty, m.SKU)
		})),
	}
	for p, hh := range h {
		mux.Handle(p, hh)
	}
}

type draftKey struct{}

// lifecycle keeps the order's status with its global transaction: PENDING before DTM hears of it,
// PAID on success, FAILED on rollback.
func (s *shop) lifecycle(guard *idemkit.Guard) *hooks.Lifecycle {
	settle := func(ctx context.Context, gid, status string) error {
		return s.db.WithContext(ctx).Exec("UPDATE orders SET status = ? WHERE gid = ? AND status = 'PENDING'", status, gid).Error
	}
	return &hooks.Lifecycle{
		Guard: guard,
		Before: hooks.BeforeTransactionFunc(func(ctx context.Context, t *hooks.Txn) error {
			m := ctx.Value(draftKey{}).(*move)
			return s.db.WithContext(ctx).Exec("INSERT INTO orders (id, k, user_id, sku, qty, amount, status, gid) VALUES (?, ?, ?, ?, ?, ?, 'PENDING', ?)",
				m.Order, t.Record.Key, m.User, m.SKU, m.Qty, m.Amount, t.GID).Error
		}),
		OnCommit:   hooks.CommitFunc(func(ctx context.Context, t *hooks.Txn, _ []byte) error { return settle(ctx, t.GID, "PAID") }),
		OnRollback: hooks.RollbackFunc(func(ctx context.Context, t *hooks.Txn, _ error) error { return settle(ctx, t.GID, "FAILED") }),
	}
}

// order starts key's order as a saga or a TCC through the initiators and returns the order id it
// created, or the one a finished earlier attempt created (replayed).
func (s *shop) order(ctx context.Context, sagas *saga.Initiator, tccs *tcc.Global, key string, useTCC bool, m move) (hooks.Outcome, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	m.Order = "o-" + hex.EncodeToString(b[:])
	ctx = context.WithValue(ctx, draftKey{}, &m)
	result, _ := json.Marshal(m.Order)
	u := s.url
	if useTCC {
		return tccs.Run(ctx, tcc.RunParams{
			Call:    idemkit.Call{Scope: "order-tcc", Key: key},
			Options: func(t *dtmcli.Tcc) { t.RetryInterval, t.TimeoutToFail, t.RequestTimeout = 1, s.timeout, 5 },
			Tries: func(t *dtmcli.Tcc) error {
				if _, err := t.CallBranch(m, u+"/inv/reserve", u+"/inv/confirm", u+"/inv/cancel"); err != nil {
					return err
				}
				_, err := t.CallBranch(m, u+"/pay/freeze", u+"/pay/confirm", u+"/pay/cancel")
				return err
			},
			Result: result,
		})
	}
	return sagas.Submit(ctx, saga.SubmitParams{
		Call: idemkit.Call{Scope: "order-saga", Key: key},
		Steps: func(sg *dtmcli.Saga) {
			sg.Add(u+"/inv/deduct", u+"/inv/restore", m)
			sg.Add(u+"/pay/debit", u+"/pay/refund", m)
			sg.RetryInterval, sg.RequestTimeout = 1, 5
		},
		Result: result,
	})
}

// TestDTMHA runs orders as sagas and TCCs through two DTM servers that share a MariaDB store,
// reached through a failover proxy, and kills one server (SIGKILL) mid-storm. Each key's order is
// submitted twice at once. Afterwards (the reconciler and the surviving server's cron finish what the
// dead one left), every order must be PAID or FAILED with its transaction's final status, no key may
// have two paid orders, money and stock must be conserved, and nothing may stay frozen, reserved,
// PENDING or PROCESSING.
func TestDTMHA(t *testing.T) {
	t.Parallel()
	sc := scaleFromEnv()
	started := time.Now()
	d := cluster.StartDTMClusterT(t, nil)
	t.Logf("2 DTM servers on a shared MariaDB store, behind %s, up in %s", d.Proxy().URL(), time.Since(started).Round(time.Millisecond))
	ctx := context.Background()

	db := openNode(t, d.Store(), "", 2)
	must(t, db.Exec("CREATE DATABASE shop").Error)
	s := &shop{
		db:      openNode(t, d.Store(), "shop", 40),
		users:   map[string]int64{"rich0": 1_000_000, "rich1": 1_000_000, "rich2": 1_000_000, "poor0": 900, "poor1": 500},
		skus:    map[string]int64{"plenty0": 100_000, "plenty1": 100_000, "scarce0": 15},
		timeout: 20,
	}
	s.create(t)
	bar, err := barrier.NewGorm(s.db, &barrier.GormOptions{Table: "barrier"})
	must(t, err)
	must(t, bar.CreateTable(ctx))
	s.store, err = record.New(s.db, &record.Options{Table: "records"})
	must(t, err)
	must(t, s.store.CreateTable(ctx))
	mux := http.NewServeMux()
	s.routes(t, bar, mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s.url = srv.URL

	// The initiators' records: a lease past the initiators' wait, after which the reconciler asks DTM.
	guard, err := idemkit.New(s.store, &idemkit.Options{Lease: 8 * time.Second})
	must(t, err)
	lc := s.lifecycle(guard)
	status := &txstatus.Client{Server: d.URL()}
	sagas := &saga.Initiator{Server: d.URL(), Lifecycle: lc, Wait: 3 * time.Second, Status: status}
	tccs := &tcc.Global{Server: d.URL(), Lifecycle: lc, Wait: 3 * time.Second, Status: status}
	rec := &hooks.Reconciler{Lifecycle: lc, Scopes: []string{"order-saga", "order-tcc"}, Manager: status}
	sw, err := sweep.New(&sweep.Options{Interval: 500 * time.Millisecond}, rec.Task())
	must(t, err)
	swCtx, stopSweep := context.WithCancel(ctx)
	sw.Start(swCtx)
	t.Cleanup(func() { stopSweep(); _ = sw.Close() })

	users := []string{"rich0", "rich1", "rich2", "poor0", "poor1"}
	skus := []string{"plenty0", "plenty1", "scarce0"}
	var (
		mu         sync.Mutex
		outcomes   = map[string]string{} // key → how its (last) answer ended
		unfinished []string
		dtmStore   = openNode(t, d.Store(), "dtm", 2)
	)
	victim := d.Servers()[0]
	st := storm{
		Procs: 1, Dup: 2, Workers: 10,
		Before: sc.pick(40, 400), After: sc.pick(80, 800), Deadline: 4 * time.Minute,
		Do: func(ctx context.Context, _ int, key string) (string, error) {
			m := move{User: users[hash(key)%len(users)], SKU: skus[hash(key+"s")%len(skus)], Qty: 1 + int64(hash(key+"q")%3), Amount: 100 + int64(hash(key+"a")%300)}
			out, err := s.order(ctx, sagas, tccs, key, hash(key+"t")%2 == 0, m)
			if err != nil && !out.Replayed {
				return "", err
			}
			mu.Lock()
			outcomes[key] = string(out.Status)
			mu.Unlock()
			// The answer every copy must agree on: the key's record, once settled; here, what
			// the client was told it created or replayed.
			return "answered", nil
		},
		Retry: func(err error) string {
			switch {
			case errors.Is(err, idemkit.ErrInFlight):
				return "in flight"
			case err != nil:
				return "transaction manager or store error"
			}
			return ""
		},
		Fault: func(ctx context.Context) error {
			// Kill while transactions are open (the workers may all be between two orders for an
			// instant): wait until the store holds one not final yet, at most 30 s.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				var open int64
				if err := dtmStore.Raw("SELECT COUNT(*) FROM trans_global WHERE status NOT IN ('succeed', 'failed')").Scan(&open).Error; err != nil {
					return err
				}
				if open > 0 || time.Now().After(deadline) {
					break
				}
			}
			if err := victim.Kill(); err != nil {
				return err
			}
			// What the dead server may have been driving: every transaction not final yet.
			return dtmStore.Raw("SELECT gid FROM trans_global WHERE status NOT IN ('succeed', 'failed')").Scan(&unfinished).Error
		},
	}
	res := st.run(t, "ord")
	fwd, over, none := d.Proxy().Stats()
	t.Logf("%s; proxy: %d requests answered, %d after failing over, %d unanswered", res, fwd, over, none)

	// Settle: the reconciler and the surviving server finish everything.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var pending, processing int64
		must(t, s.db.Raw("SELECT COUNT(*) FROM orders WHERE status = 'PENDING'").Scan(&pending).Error)
		must(t, s.db.Raw("SELECT COUNT(*) FROM records WHERE status = 'PROCESSING'").Scan(&processing).Error)
		if pending == 0 && processing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled after 2 minutes: %d orders PENDING, %d records PROCESSING", pending, processing)
		}
		time.Sleep(200 * time.Millisecond)
	}
	violations := s.check(t, d, status)
	for _, gid := range unfinished {
		if st, err := status.Status(ctx, gid); err != nil || !st.Final() {
			violations++
			t.Errorf("transaction %s, unfinished when the server died, is %s (%v)", gid, st, err)
		}
	}
	t.Logf("DTM server 0 killed with SIGKILL mid-storm: %d transactions were unfinished then, all final now", len(unfinished))
	if len(unfinished) == 0 {
		t.Errorf("no transaction was unfinished when the server died: the kill did not happen under load")
	}
	if violations > 0 {
		t.Errorf("%d violations", violations)
	}
	t.Logf("violations: %d", violations)
}

// check verifies the invariants with plain SQL and the DTM query API; it returns the violations.
func (s *shop) check(t *testing.T, d *cluster.DTMCluster, status *txstatus.Client) int {
	t.Helper()
	violations := 0
	bad := func(format string, args ...any) {
		violations++
		if violations <= 10 {
			t.Logf(format, args...)
		}
	}
	type order struct {
		ID, K, UserID, SKU, Status, Gid string
		Qty, Amount                     int64
	}
	var orders []order
	must(t, s.db.Raw("SELECT id, k, user_id, sku, status, gid, qty, amount FROM orders ORDER BY seq").Scan(&orders).Error)
	paidBy := map[string]int{}
	var paidAmount = map[string]int64{}
	var paidQty = map[string]int64{}
	for _, o := range orders {
		st, err := status.Status(context.Background(), o.Gid)
		if err != nil {
			bad("order %s: DTM status of %s: %v", o.ID, o.Gid, err)
			continue
		}
		switch {
		case o.Status == "PAID" && st == txstatus.Succeed:
			paidBy[o.K]++
			paidAmount[o.UserID] += o.Amount
			paidQty[o.SKU] += o.Qty
		case o.Status == "FAILED" && st == txstatus.Failed:
		default:
			bad("order %s (key %s): status %s, its transaction %s is %s", o.ID, o.K, o.Status, o.Gid, st)
		}
	}
	for k, n := range paidBy {
		if n > 1 {
			bad("key %s has %d paid orders", k, n)
		}
	}
	for u, initial := range s.users {
		var bal, frozen int64
		must(t, s.db.Raw("SELECT balance, frozen FROM accounts WHERE user_id = ?", u).Row().Scan(&bal, &frozen))
		if frozen != 0 || bal+paidAmount[u] != initial {
			bad("account %s: balance %d + frozen %d + paid %d, want %d and nothing frozen", u, bal, frozen, paidAmount[u], initial)
		}
	}
	for k, initial := range s.skus {
		var stock, reserved int64
		must(t, s.db.Raw("SELECT stock, reserved FROM stock WHERE sku = ?", k).Row().Scan(&stock, &reserved))
		if reserved != 0 || stock+paidQty[k] != initial {
			bad("sku %s: stock %d + reserved %d + sold %d, want %d and nothing reserved", k, stock, reserved, paidQty[k], initial)
		}
	}
	var recs []struct {
		Scope, IdemKey, Status string
	}
	must(t, s.db.Raw("SELECT scope, idem_key, status FROM records").Scan(&recs).Error)
	for _, r := range recs {
		paid := paidBy[r.IdemKey] > 0
		if (r.Status == "SUCCEEDED") != paid || (r.Status != "SUCCEEDED" && r.Status != "FAILED") {
			bad("record %s/%s is %s, key has %d paid orders", r.Scope, r.IdemKey, r.Status, paidBy[r.IdemKey])
		}
	}
	t.Logf("%d orders over %d keys checked (%d paid); %d records", len(orders), len(recs), len(paidBy), len(recs))
	return violations
}

// hash is a small deterministic hash for spreading keys over users and products.
func hash(s string) int {
	h := 0
	for i := 0; i < len(s); i++ {
		h = h*31 + int(s[i])
	}
	if h < 0 {
		h = -h
	}
	return h
}
