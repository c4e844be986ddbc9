package saga_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/sweep"
	"github.com/idemkit/idemkit/txstatus"
)

// The initiating service: one saga per Idempotency-Key. The order row is inserted under the saga's
// gid once the key is claimed, before DTM hears of the saga, and the hooks keep it in step with the
// outcome. A duplicate gets the stored result (or 409 while the first saga runs); a reused key with
// another order is refused; a rolled-back saga leaves the key free for a retry.
func ExampleInitiator() {
	var db *gorm.DB          // opened by the application, with an orders table
	var guard *idemkit.Guard // over record.Store and lock.Locker, as in the quick start
	const dtm, svc = "http://dtm:36789/api/dtmsvr", "http://shop:8080"
	type order struct {
		User   string `json:"user"`
		Amount int    `json:"amount"`
	}
	setStatus := func(ctx context.Context, gid, status string) error {
		return db.WithContext(ctx).Exec("UPDATE orders SET status = ? WHERE gid = ? AND status = 'PENDING'", status, gid).Error
	}
	lifecycle := &hooks.Lifecycle{
		Guard: guard,
		OnCommit: hooks.CommitFunc(func(ctx context.Context, t *hooks.Txn, _ []byte) error {
			return setStatus(ctx, t.GID, "PAID")
		}),
		OnRollback: hooks.RollbackFunc(func(ctx context.Context, t *hooks.Txn, _ error) error {
			return setStatus(ctx, t.GID, "FAILED")
		}),
	}
	http.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		var req order
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		l := *lifecycle // plus this request's Before hook: the order row, under the saga's gid
		l.Before = hooks.BeforeTransactionFunc(func(ctx context.Context, t *hooks.Txn) error {
			return db.WithContext(ctx).Exec("INSERT INTO orders (gid, user_id, amount, status) VALUES (?, ?, ?, 'PENDING')",
				t.GID, req.User, req.Amount).Error
		})
		gid := txstatus.NewGID()
		initiator := &saga.Initiator{Server: dtm, Lifecycle: &l, Wait: 5 * time.Second}
		out, err := initiator.Submit(r.Context(), saga.SubmitParams{
			Call: idemkit.Call{
				Scope:       "POST /orders",
				Key:         r.Header.Get("Idempotency-Key"),
				Fingerprint: fmt.Sprintf("%x", sha256.Sum256(fmt.Appendf(nil, "%+v", req))), // another order: 422
			},
			GID:    gid,
			Result: fmt.Appendf(nil, `{"gid":%q}`, gid), // stored with the claim, replayed to duplicates
			Steps: func(s *dtmcli.Saga) {
				s.Add(svc+"/stock/deduct", svc+"/stock/restore", req).Add(svc+"/pay/debit", svc+"/pay/refund", req)
			},
		})
		switch {
		case errors.Is(err, idemkit.ErrInvalidKey): // no Idempotency-Key, or an unusable one: no retry helps
			http.Error(w, err.Error(), http.StatusBadRequest)
		case errors.Is(err, idemkit.ErrInFlight):
			http.Error(w, "an order with this key is in progress", http.StatusConflict)
		case errors.Is(err, idemkit.ErrPayloadMismatch), errors.Is(err, idemkit.ErrRejected):
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		case err != nil: // store, lock or DTM unreachable, or DTM's answer lost: retry with the same key
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case out.Status == txstatus.Failed: // rolled back: the same key may be retried
			http.Error(w, out.Reason.Error(), http.StatusConflict)
		case out.Status == txstatus.Aborting: // rolling back (a compensation still retried): no result
			http.Error(w, "rolling back: "+out.Reason.Error(), http.StatusConflict)
		case out.Replayed, out.Status == txstatus.Succeed:
			_, _ = w.Write(out.Result)
		default: // still running after Wait: not a success yet (it may roll back); the reconciler settles it
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write(out.Result)
		}
	})
}

// The step service: each step's action and compensation run behind the branch barrier in one local
// transaction; a concurrent redelivery of the same step is answered 425 by the Redis lock in front.
func ExampleAction() {
	var db *gorm.DB       // opened by the application
	var rdb *redis.Client // opened with ContextTimeoutEnabled
	ctx := context.Background()
	bar, err := barrier.NewGorm(db, nil) // DTM's table, dtm_barrier.barrier
	if err != nil {
		log.Fatal(err)
	}
	if err := bar.CreateTable(ctx); err != nil { // CREATE TABLE IF NOT EXISTS, once at start
		log.Fatal(err)
	}
	steps, err := dtmhttp.New(&dtmhttp.Options{Locker: lock.New(rdb, nil)})
	if err != nil {
		log.Fatal(err)
	}
	type transfer struct {
		Amount int `json:"amount"`
	}
	http.Handle("POST /TransOut", saga.Action(steps, dtmhttp.Gorm(bar, func(ctx context.Context, tx *gorm.DB, t transfer) error {
		res := tx.Exec("UPDATE account SET balance = balance - ? WHERE id = 1 AND balance >= ?", t.Amount, t.Amount)
		if res.Error == nil && res.RowsAffected == 0 {
			return idemkit.Permanent(errors.New("insufficient balance")) // 409: the saga rolls back
		}
		return res.Error // other errors: 500, DTM retries
	})))
	http.Handle("POST /TransOutCompensate", saga.Compensate(steps, dtmhttp.Gorm(bar, func(ctx context.Context, tx *gorm.DB, t transfer) error {
		// A compensation never refuses: DTM retries it until it succeeds.
		return tx.Exec("UPDATE account SET balance = balance + ? WHERE id = 1", t.Amount).Error
	})))
}

// The reconciler settles records whose initiator died after submitting (or gave up waiting): it asks
// DTM for each PROCESSING record with a gid whose lease ran out and runs the same Commit/Rollback hooks.
// A gid DTM never heard of is fenced first (DTM then refuses a late submit of it), logged at error
// level and counted through Observe.
func Example_reconciler() {
	var store *record.Store        // the initiator's record store
	var lifecycle *hooks.Lifecycle // the initiator's Lifecycle
	var rdb *redis.Client
	var fenced atomic.Int64 // export it as a metric, and alert when it grows
	rc := &hooks.Reconciler{
		Lifecycle: lifecycle,
		Scopes:    []string{"POST /orders"}, // this Lifecycle's scopes: never another's records
		Manager:   &txstatus.Client{Server: "http://dtm:36789/api/dtmsvr"},
		TransType: "saga",
		Logger:    slog.Default(),
		Observe: func(_ context.Context, e *hooks.ReconcileEvent) {
			if e.Fenced {
				fenced.Add(1)
			}
		},
	}
	sw, err := sweep.New(&sweep.Options{
		Interval: 30 * time.Second,
		Locker:   lock.New(rdb, nil), // one instance at a time across the fleet
	}, append(sweep.RecordTasks(store), rc.Task())...)
	if err != nil {
		log.Fatal(err)
	}
	sw.Start(context.Background())
	defer sw.Close()
}
