package chaosdtmmsg

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/saga"
)

// Scope is the record scope of every publication.
const Scope = "POST /orders (msg)"

// Tables names a run's tables.
type Tables struct {
	Barrier string `json:"barrier"`
	Records string `json:"records"`
	Orders  string `json:"orders"` // written by the local transactions
	Inbox   string `json:"inbox"`  // written by the message's branch
}

// NewTables returns the table names of a run whose names start with prefix.
func NewTables(prefix string) Tables {
	return Tables{Barrier: prefix + "_barrier", Records: prefix + "_records", Orders: prefix + "_orders", Inbox: prefix + "_inbox"}
}

// World is what a publisher and the checker share: the database, the barrier, the record store and
// the Guard. Build one with [Open].
type World struct {
	DB      *gorm.DB
	Tables  Tables
	Barrier *barrier.Gorm
	Store   *record.Store
	Guard   *idemkit.Guard
	// Deliveries counts the branch calls that reached Handler (including duplicates the barrier skipped).
	Deliveries atomic.Int64
}

// Open opens the world of tables on dsn; lease is the Guard's Lease.
func Open(dsn string, tables Tables, lease time.Duration) (*World, error) {
	db, err := gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, err
	}
	w := &World{DB: db, Tables: tables}
	if w.Barrier, err = barrier.NewGorm(db, &barrier.GormOptions{Table: tables.Barrier}); err != nil {
		return nil, err
	}
	if w.Store, err = record.New(db, &record.Options{Table: tables.Records}); err != nil {
		return nil, err
	}
	if w.Guard, err = idemkit.New(w.Store, &idemkit.Options{Lease: lease}); err != nil {
		return nil, err
	}
	return w, nil
}

// Close closes the pool.
func (w *World) Close() {
	if sqlDB, err := w.DB.DB(); err == nil {
		_ = sqlDB.Close()
	}
}

// Create creates the tables.
func (w *World) Create(ctx context.Context) error {
	if err := w.Barrier.CreateTable(ctx); err != nil {
		return err
	}
	if err := w.Store.CreateTable(ctx); err != nil {
		return err
	}
	for _, s := range []string{
		// No unique key on idem_key: one committed order per key is the publisher's promise.
		"CREATE TABLE " + w.Tables.Orders + " (gid VARCHAR(128) NOT NULL PRIMARY KEY, idem_key VARCHAR(128) NOT NULL, amount BIGINT NOT NULL, KEY (idem_key)) ENGINE=InnoDB",
		"CREATE TABLE " + w.Tables.Inbox + " (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, gid VARCHAR(128) NOT NULL, idem_key VARCHAR(128) NOT NULL, KEY (gid)) ENGINE=InnoDB",
	} {
		if err := w.DB.WithContext(ctx).Exec(s).Error; err != nil {
			return err
		}
	}
	return nil
}

// Drop drops the tables.
func (w *World) Drop(ctx context.Context) error {
	t := w.Tables
	return w.DB.WithContext(ctx).Exec("DROP TABLE IF EXISTS " + t.Barrier + ", " + t.Records + ", " + t.Orders + ", " + t.Inbox).Error
}

// Order is the payload of the message's branch.
type Order struct {
	Key    string `json:"key"`
	Amount int64  `json:"amount"`
}

// Handler serves the message's branch (POST /inbox, a guarded msg action that inserts one inbox row)
// and DTM's back-check (GET /query-prepared).
//
// With brokenBackCheck the back-check answers SUCCESS whatever happened (a sabotage the checker must
// catch: messages whose local transaction never committed get published).
func (w *World) Handler(brokenBackCheck bool) (http.Handler, error) {
	steps, err := dtmhttp.New(nil)
	if err != nil {
		return nil, err
	}
	inbox := saga.Action(steps, dtmhttp.Gorm(w.Barrier, func(ctx context.Context, tx *gorm.DB, o Order) error {
		req, _ := dtmhttp.RequestFromContext(ctx)
		return tx.Exec("INSERT INTO "+w.Tables.Inbox+" (gid, idem_key) VALUES (?, ?)", req.Branch.Gid, o.Key).Error
	}))
	mux := http.NewServeMux()
	mux.Handle("POST /inbox", http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.Deliveries.Add(1)
		inbox.ServeHTTP(rw, r)
	}))
	if brokenBackCheck {
		mux.HandleFunc("GET /query-prepared", func(rw http.ResponseWriter, _ *http.Request) {
			_, _ = rw.Write([]byte(`{"dtm_result":"SUCCESS"}`))
		})
	} else {
		mux.Handle("GET /query-prepared", dtmmsg.BackCheck(w.Barrier))
	}
	return mux, nil
}

// ErrOutOfStock is the permanent failure of a local transaction asked to fail.
var ErrOutOfStock = errors.New("out of stock")

// Publisher returns a publisher on dtm whose branch and back-check are served at svc (the base URL
// of Handler).
func (w *World) Publisher(dtm, svc string, wait time.Duration) *dtmmsg.Publisher {
	return &dtmmsg.Publisher{
		Server: dtm, DB: w.DB, Barrier: w.Barrier, QueryPrepared: svc + "/query-prepared", Wait: wait,
		Lifecycle: &hooks.Lifecycle{Guard: w.Guard},
	}
}

// PublishOrder publishes the order of key with pub: the local transaction inserts the order (or fails
// permanently when amount is negative), the message's one branch inserts the inbox row. inLocal, when
// set, runs inside the local transaction after the insert.
func (w *World) PublishOrder(ctx context.Context, pub *dtmmsg.Publisher, svc, key string, amount int64, inLocal func()) (hooks.Outcome, error) {
	return pub.Publish(ctx, dtmmsg.PublishParams{
		Call: idemkit.Call{Scope: Scope, Key: key, Fingerprint: fmt.Sprint(amount)},
		Steps: func(m *dtmcli.Msg) {
			m.Add(svc+"/inbox", Order{Key: key, Amount: amount})
			m.RetryInterval, m.TimeoutToFail = 1, 1 // back-check a prepared message after about a second
		},
		Local: func(ctx context.Context, tx *gorm.DB, gid string) error {
			if amount < 0 {
				return idemkit.Permanent(ErrOutOfStock)
			}
			if err := tx.Exec("INSERT INTO "+w.Tables.Orders+" (gid, idem_key, amount) VALUES (?, ?, ?)", gid, key, amount).Error; err != nil {
				return err
			}
			if inLocal != nil {
				inLocal()
			}
			return nil
		},
		Result: []byte(`{"order":"` + key + `"}`),
	})
}
