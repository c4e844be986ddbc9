package msgx_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/msgx"
)

// TestPanicStaysRetryableUnderAStrictClassifier: a handler's panic is a retryable failure (the message
// is redelivered), but the *msgx.PanicError was classified by Options.IsPermanent: under one calling
// every unknown error permanent the delivery was dead-lettered as Rejected on its first attempt and the
// key recorded REJECTED, so no redelivery ever ran it again.
func TestPanicStaysRetryableUnderAStrictClassifier(t *testing.T) {
	errTransient := errors.New("transient")
	strict := func(err error) bool { return !errors.Is(err, errTransient) }
	f := newTx(t, testsvc.MySQL(t, nil), &idemkit.Options{IsPermanent: strict}, &msgx.Options{MaxAttempts: 5})
	for name, h := range map[string]msgx.HandleFunc{
		"Execute": f.mg.Execute(func(context.Context, *msgx.Message) error { panic("nil map") }),
		"Tx":      f.mg.Tx(f.db, f.records, func(context.Context, *gorm.DB, *msgx.Message) error { panic("nil map") }),
	} {
		t.Run(name, func(t *testing.T) {
			id := "panic-" + name
			d := h(context.Background(), msg(id))
			want(t, d, msgx.Retry, msgx.Failed)
			var pe *msgx.PanicError
			if !errors.As(d.Err, &pe) {
				t.Fatalf("%v, want a *PanicError", d.Err)
			}
			if st := f.status(t, id); st == idemkit.StatusRejected {
				t.Fatalf("record %s, want it free for the redelivery", st)
			}
		})
	}
}
