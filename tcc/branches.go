package tcc

import (
	"net/http"

	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
)

// Try returns the handler of a TCC try (op "try"), called by the initiator through
// dtmcli.Tcc.CallBranch: it reserves resources behind the barrier and answers 200, 409 for a permanent
// business failure (the initiator aborts and DTM cancels the tried branches), 425 while another
// delivery of the same try holds the lock, 500 for anything else (the initiator aborts too). A try
// arriving after its cancel does nothing and answers 200. b may be nil for default options. See
// [dtmhttp.Branches.Handle] for the details and panics.
func Try(b *dtmhttp.Branches, run dtmhttp.Business) http.Handler {
	return b.Handle(barrier.OpTry, run)
}

// Confirm returns the handler of a TCC confirm (op "confirm"), delivered by DTM after every try
// succeeded. It must succeed eventually: DTM retries it until it does, and a permanent error is
// answered 500 and logged as a bug. b may be nil for default options.
func Confirm(b *dtmhttp.Branches, run dtmhttp.Business) http.Handler {
	return b.Handle(barrier.OpConfirm, run)
}

// Cancel returns the handler of a TCC cancel (op "cancel"), delivered by DTM after the transaction
// aborted. The barrier skips it when its try never ran (empty cancel). Like Confirm it must succeed
// eventually. b may be nil for default options.
func Cancel(b *dtmhttp.Branches, run dtmhttp.Business) http.Handler {
	return b.Handle(barrier.OpCancel, run)
}
