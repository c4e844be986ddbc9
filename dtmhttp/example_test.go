package dtmhttp_test

import (
	"context"
	"log"
	"log/slog"
	"net/http"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
)

// A Business written by hand: the handler holds its own local transaction (here to write an outbox row
// next to the business change) and calls the barrier inside it.
func ExampleBranches_Handle() {
	var db *gorm.DB
	bar, err := barrier.NewGorm(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	branches, err := dtmhttp.New(&dtmhttp.Options{Logger: slog.Default()})
	if err != nil {
		log.Fatal(err)
	}
	ship := func(ctx context.Context, req *dtmhttp.Request) (barrier.Outcome, error) {
		var out barrier.Outcome
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var err error
			out, err = bar.CallOutcome(ctx, tx, req.Branch, func(tx *gorm.DB) error {
				order, err := dtmhttp.Decode[struct {
					OrderID string `json:"order_id"`
				}](req.Payload)
				if err != nil {
					return err // malformed: 409, the saga rolls back
				}
				if err := tx.Exec("UPDATE orders SET status = 'SHIPPING' WHERE id = ?", order.OrderID).Error; err != nil {
					return err
				}
				return tx.Exec("INSERT INTO outbox (topic, body) VALUES ('shipping', ?)", req.Payload).Error
			})
			return err
		})
		return out, err
	}
	http.Handle("POST /ship", branches.Handle(barrier.OpAction, ship))
}
