package dtmmsg_test

import (
	"context"
	"errors"
	"log"
	"net/http"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/go-chi/chi/v5"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/sweep"
	"github.com/idemkit/idemkit/txstatus"
)

// An order service that creates an order in its local transaction and publishes "order created" as
// a DTM 2-phase message, once per client key.
func ExamplePublisher() {
	ctx := context.Background()
	db, err := gorm.Open(mysql.Open("root:@tcp(127.0.0.1:3306)/shop"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	bar, err := barrier.NewGorm(db, nil) // dtm_barrier.barrier, in the business database
	if err != nil {
		log.Fatal(err)
	}
	store, err := record.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	guard, err := idemkit.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	pub := &dtmmsg.Publisher{
		Server:        "http://127.0.0.1:36789/api/dtmsvr",
		DB:            db,
		Barrier:       bar,
		QueryPrepared: "http://orders:8080/dtm/query-prepared", // where DTM reaches the back-check
		Wait:          5 * time.Second,
		Lifecycle:     &hooks.Lifecycle{Guard: guard},
	}
	r := chi.NewRouter()
	r.Method(http.MethodGet, "/dtm/query-prepared", dtmmsg.BackCheck(bar))

	out, err := pub.Publish(ctx, dtmmsg.PublishParams{
		Call: idemkit.Call{Scope: "POST /orders", Key: "client-key-1"},
		Steps: func(m *dtmcli.Msg) {
			m.Add("http://stock:8081/stock/reserve", map[string]any{"item": "book", "qty": 1})
		},
		Local: func(ctx context.Context, tx *gorm.DB, gid string) error { // commits with the barrier row
			return tx.Exec("INSERT INTO orders (gid, item, qty) VALUES (?, 'book', 1)", gid).Error
		},
		Result: []byte(`{"status":"created"}`), // replayed to duplicates
	})
	switch {
	case errors.Is(err, idemkit.ErrInFlight): // the same key is being published right now
	case errors.Is(err, idemkit.ErrRejected): // Local failed permanently: refused for good, on the first call as on replays
	case errors.Is(err, dtmmsg.ErrLocalFailed): // nothing committed, nothing published: retry with the key
	case err != nil: // DTM or the database unreachable: see Publish
	case out.Replayed: // a duplicate: out.Result is the stored result, nothing published again
	}
	_ = http.ListenAndServe(":8080", r)
}

// The reconciler settles the records of publishers that died, in the background.
func ExampleReconciler() {
	var bar *barrier.Gorm          // the publisher's barrier
	var lifecycle *hooks.Lifecycle // its Lifecycle
	rc := &dtmmsg.Reconciler{
		Lifecycle: lifecycle,
		Barrier:   bar,
		Scopes:    []string{"POST /orders"},
		Status:    (&txstatus.Client{Server: "http://127.0.0.1:36789/api/dtmsvr"}).Status,
	}
	sw, err := sweep.New(&sweep.Options{Interval: 30 * time.Second}, rc.Task())
	if err != nil {
		log.Fatal(err)
	}
	sw.Start(context.Background())
	defer sw.Close()
}
