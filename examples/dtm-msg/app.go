package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/glebarez/sqlite"
	"github.com/go-chi/chi/v5"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// app is the order service (orders, the record table, the barrier) and the inbox service (the
// message's branch), sharing one SQLite database for the demo.
type app struct {
	db      *gorm.DB
	bar     *barrier.Gorm
	store   *record.Store
	pub     *dtmmsg.Publisher
	svc     string // base URL of the HTTP service
	dtm     string
	closeFn func()
}

// order is the message's payload.
type order struct {
	Key   string `json:"key"`
	Items int    `json:"items"`
}

var errOutOfStock = errors.New("out of stock")

func newApp(ctx context.Context, dtm, dir string) (*app, error) {
	db, err := gorm.Open(sqlite.Open(dir+"/shop.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, err
	}
	a := &app{db: db, dtm: dtm}
	for _, s := range []string{
		"CREATE TABLE orders (gid TEXT PRIMARY KEY, idem_key TEXT NOT NULL, items INTEGER NOT NULL)",
		"CREATE TABLE inbox (id INTEGER PRIMARY KEY AUTOINCREMENT, gid TEXT NOT NULL, idem_key TEXT NOT NULL)",
	} {
		if err := db.WithContext(ctx).Exec(s).Error; err != nil {
			return nil, err
		}
	}
	if a.bar, err = barrier.NewGorm(db, nil); err != nil {
		return nil, err
	}
	if err := a.bar.CreateTable(ctx); err != nil {
		return nil, err
	}
	if a.store, err = record.New(db, nil); err != nil {
		return nil, err
	}
	if err := a.store.CreateTable(ctx); err != nil {
		return nil, err
	}
	guard, err := idemkit.New(a.store, &idemkit.Options{Lease: 2 * time.Second})
	if err != nil {
		return nil, err
	}

	// The HTTP service: the message's branch and DTM's back-check, on chi.
	steps, err := dtmhttp.New(nil)
	if err != nil {
		return nil, err
	}
	r := chi.NewRouter()
	r.Method(http.MethodPost, "/inbox", saga.Action(steps, dtmhttp.Gorm(a.bar, func(ctx context.Context, tx *gorm.DB, o order) error {
		req, _ := dtmhttp.RequestFromContext(ctx)
		return tx.Exec("INSERT INTO inbox (gid, idem_key) VALUES (?, ?)", req.Branch.Gid, o.Key).Error
	})))
	r.Method(http.MethodGet, "/dtm/query-prepared", dtmmsg.BackCheck(a.bar))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	a.svc = "http://" + ln.Addr().String()
	a.closeFn = func() {
		_ = hs.Close()
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}

	a.pub = &dtmmsg.Publisher{
		Server: dtm, DB: db, Barrier: a.bar, QueryPrepared: a.svc + "/dtm/query-prepared", Wait: 15 * time.Second,
		Lifecycle: &hooks.Lifecycle{Guard: guard},
	}
	return a, nil
}

// createOrder creates the order of key in a local transaction and publishes "order created".
func (a *app) createOrder(ctx context.Context, key string, items int) (hooks.Outcome, error) {
	return a.pub.Publish(ctx, dtmmsg.PublishParams{
		Call: idemkit.Call{Scope: "POST /orders", Key: key, Fingerprint: fmt.Sprint(items)},
		Steps: func(m *dtmcli.Msg) {
			m.Add(a.svc+"/inbox", order{Key: key, Items: items})
			m.RetryInterval, m.TimeoutToFail = 1, 1 // back-check a prepared message after about a second
		},
		Local: func(ctx context.Context, tx *gorm.DB, gid string) error {
			if items > 10 {
				return idemkit.Permanent(errOutOfStock) // nothing commits, nothing is published
			}
			return tx.Exec("INSERT INTO orders (gid, idem_key, items) VALUES (?, ?, ?)", gid, key, items).Error
		},
		Result: []byte(`{"status":"created"}`),
	})
}

func (a *app) count(table, key string) (n int64) {
	a.db.Raw("SELECT COUNT(*) FROM "+table+" WHERE idem_key = ?", key).Scan(&n)
	return n
}

// waitInbox waits until key's inbox row appears (DTM calls the branch asynchronously) or d passes.
func (a *app) waitInbox(key string, d time.Duration) int64 {
	deadline := time.Now().Add(d)
	for {
		n := a.count("inbox", key)
		if n > 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run walks through the tour against the DTM server at dtm.
func run(ctx context.Context, dtm string, out io.Writer) error {
	dir, err := os.MkdirTemp("", "dtm-msg-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	a, err := newApp(ctx, dtm, dir)
	if err != nil {
		return err
	}
	defer a.closeFn()
	step := func(n int, s string) { fmt.Fprintf(out, "%d. %s\n", n, s) }

	step(1, "create order k1: local transaction + message")
	o, err := a.createOrder(ctx, "k1", 2)
	if err != nil || o.Status != txstatus.Succeed || a.count("orders", "k1") != 1 || a.waitInbox("k1", 10*time.Second) != 1 {
		return fmt.Errorf("step 1: %+v %v", o, err)
	}
	fmt.Fprintf(out, "   message %s published; the inbox got it once\n", o.GID)

	step(2, "the client sends k1 again")
	o2, err := a.createOrder(ctx, "k1", 2)
	if err != nil || !o2.Replayed || a.count("orders", "k1") != 1 || a.count("inbox", "k1") != 1 {
		return fmt.Errorf("step 2: %+v %v", o2, err)
	}
	fmt.Fprintf(out, "   replayed %s; nothing committed or published again\n", o2.Result)

	step(3, "order k2 is out of stock: the local transaction fails")
	_, err = a.createOrder(ctx, "k2", 99)
	_, err2 := a.createOrder(ctx, "k2", 99)
	if !errors.Is(err, errOutOfStock) || !errors.Is(err2, idemkit.ErrRejected) || a.count("inbox", "k2") != 0 {
		return fmt.Errorf("step 3: %v / %v", err, err2)
	}
	fmt.Fprintf(out, "   nothing published; the duplicate gets the stored rejection\n")

	step(4, "a publisher commits its order and dies before submitting (done by hand here)")
	gid := dtmmsg.GIDPrefix + txstatus.NewGID()
	m := dtmcli.NewMsg(dtm, gid).Add(a.svc+"/inbox", order{Key: "k3", Items: 1})
	m.RetryInterval, m.TimeoutToFail = 1, 1
	if err := m.Prepare(a.pub.QueryPrepared); err != nil {
		return err
	}
	if err := a.db.Transaction(func(tx *gorm.DB) error {
		b, err := barrier.MsgBranch(gid)
		if err != nil {
			return err
		}
		if _, err := a.bar.Enter(ctx, tx, b); err != nil {
			return err
		}
		return tx.Exec("INSERT INTO orders (gid, idem_key, items) VALUES (?, 'k3', 1)", gid).Error
	}); err != nil {
		return err
	}
	// No Submit: DTM asks the back-check, which finds the commit, and publishes.
	if n := a.waitInbox("k3", 30*time.Second); n != 1 {
		return fmt.Errorf("step 4: the back-check did not publish (inbox %d)", n)
	}
	fmt.Fprintf(out, "   DTM's back-check found the commit and published %s\n", gid)

	step(5, "a publisher prepares and dies before its local transaction commits")
	gid = dtmmsg.GIDPrefix + txstatus.NewGID()
	m = dtmcli.NewMsg(dtm, gid).Add(a.svc+"/inbox", order{Key: "k4", Items: 1})
	m.RetryInterval, m.TimeoutToFail = 1, 1
	if err := m.Prepare(a.pub.QueryPrepared); err != nil {
		return err
	}
	st, err := (&txstatus.Client{Server: dtm}).Wait(ctx, gid)
	if err != nil || st != txstatus.Failed || a.count("inbox", "k4") != 0 {
		return fmt.Errorf("step 5: %s %v", st, err)
	}
	late := a.db.Transaction(func(tx *gorm.DB) error { // the publisher's local transaction, too late
		b, err := barrier.MsgBranch(gid)
		if err != nil {
			return err
		}
		_, err = a.bar.Enter(ctx, tx, b)
		return err
	})
	if !errors.Is(late, barrier.ErrDuplicate) {
		return fmt.Errorf("step 5: a late local transaction was not refused: %v", late)
	}
	fmt.Fprintf(out, "   DTM's back-check answered FAILURE; nothing published, and that local transaction can never commit now\n\n")
	fmt.Fprintln(out, "All 5 steps behaved as expected.")
	return nil
}
