package dtmmsg_test

import (
	"errors"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// TestPermanentLocalFirstCallMatchesReplay: a local transaction that fails with a permanent error
// leaves the record REJECTED, and its first call answers in the shape every replay does: an error
// matching idemkit.ErrRejected whose *idemkit.RejectedError carries the stored message (beside
// ErrLocalFailed and Local's own error, which only the first call has).
func TestPermanentLocalFirstCallMatchesReplay(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	out, err := e.w.PublishOrder(ctxb, pub, e.svc, "rej", -1, nil)
	if out.Status != txstatus.Failed || !errors.Is(err, dtmmsg.ErrLocalFailed) || !errors.Is(err, chaosdtmmsg.ErrOutOfStock) {
		t.Fatalf("first call: %+v %v", out, err)
	}
	var first *idemkit.RejectedError
	if !errors.Is(err, idemkit.ErrRejected) || !errors.As(err, &first) {
		t.Fatalf("first call's error %v does not match idemkit.ErrRejected, as its replays do", err)
	}
	dup, derr := e.w.PublishOrder(ctxb, pub, e.svc, "rej", -1, nil)
	var replayed *idemkit.RejectedError
	if !dup.Replayed || !errors.As(derr, &replayed) {
		t.Fatalf("replay: %+v %v", dup, derr)
	}
	if first.Message != replayed.Message {
		t.Fatalf("first call rejected with %q, its replay with %q", first.Message, replayed.Message)
	}
}
