package msgx_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
)

// lookupError is an error type whose Error dereferences its receiver: a nil *lookupError returned
// as an error (a function declared to return *lookupError, passed on as error) is a non-nil error
// that panics when described.
type lookupError struct{ name string }

func (e *lookupError) Error() string { return "lookup " + e.name + " failed" }

func find(string) *lookupError { return nil } // succeeded: a nil *lookupError

// TestHandlerErrorThatPanicsIsContained: a handler returning a nil *T as a non-nil error (Go's typed
// nil) whose Error dereferences it made the HandleFunc panic when the Guard recorded the error's text:
// the panic ended the adapter's worker, the consumer process with it, and each redelivery the next
// process — a message no consumer survived, never dead-lettered, though a handler's panic is promised
// to be recovered (Failed, GaveUp at MaxAttempts). The error is described inside the handler's
// recovery: such a handler is a panicking one, in both modes, its message dead-lettered GaveUp at
// MaxAttempts.
func TestHandlerErrorThatPanicsIsContained(t *testing.T) {
	db := testsvc.MySQL(t, nil)
	f := newTx(t, db, nil, &msgx.Options{MaxAttempts: 1})
	run := func(context.Context, *msgx.Message) error {
		var err error = find("order") // not nil: a nil *lookupError
		return err
	}
	for name, h := range map[string]msgx.HandleFunc{
		"execute": f.mg.Execute(run),
		"tx": f.mg.Tx(f.db, f.records, func(ctx context.Context, _ *gorm.DB, m *msgx.Message) error {
			return run(ctx, m)
		}),
	} {
		t.Run(name, func(t *testing.T) {
			var d msgx.Decision
			func() {
				defer func() {
					if v := recover(); v != nil {
						t.Fatalf("the HandleFunc panicked (the adapter's worker, and its process, would end): %v", v)
					}
				}()
				d = h(context.Background(), msg("typed-nil-"+name))
			}()
			want(t, d, msgx.DeadLetter, msgx.GaveUp)
			var pe *msgx.PanicError
			if !errors.As(d.Err, &pe) {
				t.Fatalf("%v, want a *PanicError", d.Err)
			}
		})
	}
}
