package saga_test

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"net/http"
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

// The initiating service: POST /transfers with an Idempotency-Key starts one saga per key. A duplicate
// gets the stored result (or 409 while the first saga runs); a rolled-back saga leaves the key free for
// a retry.
func ExampleInitiator() {
	var db *gorm.DB       // opened by the application
	var rdb *redis.Client // opened with ContextTimeoutEnabled
	const dtm = "http://dtm:36789/api/dtmsvr"

	store, err := record.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	guard, err := idemkit.New(store, &idemkit.Options{Locker: lock.New(rdb, nil)})
	if err != nil {
		log.Fatal(err)
	}
	initiator := &saga.Initiator{
		Server: dtm,
		Wait:   5 * time.Second, // then leave the record to the reconciler
		Lifecycle: &hooks.Lifecycle{
			Guard: guard,
			OnCommit: hooks.CommitFunc(func(ctx context.Context, t *hooks.Txn, _ []byte) error {
				return db.WithContext(ctx).Exec("UPDATE orders SET status = 'PAID' WHERE gid = ?", t.GID).Error
			}),
		},
	}

	http.HandleFunc("POST /transfers", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Amount int `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := initiator.Submit(r.Context(), saga.SubmitParams{
			Call:   idemkit.Call{Scope: "POST /transfers", Key: r.Header.Get("Idempotency-Key")},
			Result: []byte(`{"status":"transferred"}`),
			Steps: func(s *dtmcli.Saga) {
				s.Add("http://accounts/TransOut", "http://accounts/TransOutCompensate", req).
					Add("http://accounts/TransIn", "http://accounts/TransInCompensate", req)
			},
		})
		switch {
		case errors.Is(err, idemkit.ErrInFlight):
			http.Error(w, "a transfer with this key is in progress", http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		case out.Replayed, out.Status == txstatus.Succeed:
			w.Write(out.Result)
		case out.Status == txstatus.Failed:
			http.Error(w, "transfer rolled back", http.StatusUnprocessableEntity)
		default: // still running; the reconciler settles the record
			w.WriteHeader(http.StatusAccepted)
		}
	})
}

// The step service: each step's action and compensation run behind the branch barrier in one local
// transaction; a concurrent redelivery of the same step is answered 425 by the Redis lock in front.
func ExampleAction() {
	var db *gorm.DB       // opened by the application
	var rdb *redis.Client // opened with ContextTimeoutEnabled

	bar, err := barrier.NewGorm(db, nil) // DTM's dtm_barrier.barrier table
	if err != nil {
		log.Fatal(err)
	}
	steps, err := dtmhttp.New(&dtmhttp.Options{Locker: lock.New(rdb, nil)})
	if err != nil {
		log.Fatal(err)
	}
	type transfer struct {
		Amount int `json:"amount"`
	}
	adjust := func(sign int) dtmhttp.GormFunc[transfer] {
		return func(ctx context.Context, tx *gorm.DB, t transfer) error {
			res := tx.Exec("UPDATE account SET balance = balance + ? WHERE id = 1 AND balance + ? >= 0", sign*t.Amount, sign*t.Amount)
			if res.Error == nil && res.RowsAffected == 0 {
				// 409: DTM rolls the saga back. Only an action may do this.
				return idemkit.Permanent(errors.New("insufficient balance"))
			}
			return res.Error
		}
	}
	http.Handle("POST /TransOut", saga.Action(steps, dtmhttp.Gorm(bar, adjust(-1))))
	http.Handle("POST /TransOutCompensate", saga.Compensate(steps, dtmhttp.Gorm(bar, func(ctx context.Context, tx *gorm.DB, t transfer) error {
		// A compensation never refuses: DTM retries it until it succeeds.
		return tx.Exec("UPDATE account SET balance = balance + ? WHERE id = 1", t.Amount).Error
	})))
}

// The reconciler settles records whose initiator died after submitting (or gave up waiting): it asks
// DTM for each PROCESSING record with a gid whose lease ran out and runs the same Commit/Rollback hooks.
func Example_reconciler() {
	var store *record.Store        // the initiator's record store
	var lifecycle *hooks.Lifecycle // the initiator's Lifecycle
	var rdb *redis.Client

	rc := &hooks.Reconciler{
		Lifecycle: lifecycle,
		Scopes:    []string{"POST /transfers"},
		Manager:   &txstatus.Client{Server: "http://dtm:36789/api/dtmsvr"},
		TransType: "saga",
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
