package msgx_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/status"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
)

// TestConsumerStopIsNotCountedAgainstMaxAttempts: a handler cut short by the consumer's stop (the
// adapter's context cancelled: a deploy's graceful shutdown) that answered with an error not wrapping
// the context's — a gRPC call's status "Canceled", a driver's own error — on an attempt at
// MaxAttempts was dead-lettered GaveUp: the consumer's shutdown counted as the message's failure, and
// a message that never failed ended in the dead-letter queue (one wrapping context.Canceled was
// retried). A delivery whose context ended before its outcome is retried, not counted, in both
// modes, and the next delivery takes effect.
func TestConsumerStopIsNotCountedAgainstMaxAttempts(t *testing.T) {
	db := testsvc.MySQL(t, nil)
	f := newTx(t, db, nil, &msgx.Options{MaxAttempts: 1})
	cut := func(ctx context.Context) error {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err() // what a gRPC client returns, not wrapping ctx.Err()
	}
	modes := map[string]func(run func(ctx context.Context) error) msgx.HandleFunc{
		"execute": func(run func(ctx context.Context) error) msgx.HandleFunc {
			return f.mg.Execute(func(ctx context.Context, _ *msgx.Message) error { return run(ctx) })
		},
		"tx": func(run func(ctx context.Context) error) msgx.HandleFunc {
			return f.mg.Tx(f.db, f.records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
				if err := tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 10).Error; err != nil {
					return err
				}
				return run(ctx)
			})
		},
	}
	for name, handle := range modes {
		t.Run(name, func(t *testing.T) {
			id := "stop-" + name
			ctx, cancel := context.WithCancel(context.Background())
			d := handle(func(hctx context.Context) error {
				cancel() // the consumer stops while the handler runs
				return cut(hctx)
			})(ctx, msg(id))
			if d.Action != msgx.Retry || d.Outcome != msgx.Failed {
				t.Fatalf("the delivery the consumer's stop cut short: %v, want a retry (Failed): no failure of the message", d)
			}
			d = handle(func(context.Context) error { return nil })(context.Background(), msg(id))
			want(t, d, msgx.Ack, msgx.Processed)
		})
	}
}
