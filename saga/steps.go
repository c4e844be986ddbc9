package saga

import (
	"net/http"

	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
)

// Action returns the handler of a saga step's action (op "action"; msg transactions use it too): it
// runs run behind the barrier and answers 200, 409 for a permanent business failure (the saga rolls
// back), 425 while another delivery of the same action holds the lock, 500 for anything else (DTM
// retries). b may be nil for default options. See [dtmhttp.Branches.Handle] for the details and panics.
func Action(b *dtmhttp.Branches, run dtmhttp.Business) http.Handler {
	return b.Handle(barrier.OpAction, run)
}

// Compensate returns the handler of a saga step's compensation (op "compensate"). The barrier skips
// it when the action never ran (null compensation) and skips a late action after it. A compensation
// must succeed eventually: DTM retries it until it does, and a permanent error is answered 500 and
// logged as a bug. b may be nil for default options.
func Compensate(b *dtmhttp.Branches, run dtmhttp.Business) http.Handler {
	return b.Handle(barrier.OpCompensate, run)
}
