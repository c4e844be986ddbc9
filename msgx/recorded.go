package msgx

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idemkit"
)

// Recorded returns the decision m's record stands for, read without claiming it or running anything:
// what a delivery of m would be answered from the record alone. It is for a message the broker
// dropped without a decision (msgx/natsjs: a consumer process that died during the message's last
// delivery), whose handler must not run again:
//
//   - Ack, Duplicate (Replayed) when its key succeeded;
//   - Rejected (Replayed; dead-lettered or acknowledged, as Options.OnReject says) when it failed
//     permanently;
//   - DeadLetter, Poison when m has no usable key or its key was used with another payload;
//   - Retry, InFlight, Delay the holder's remaining lease, when a delivery holds the key now (its
//     PROCESSING record: Execute mode; a Tx-mode delivery writes its record when it commits, and
//     reads as no record while it runs);
//   - Retry, Failed when nothing finished it (no record, FAILED, a claim whose lease ran out, an
//     expired record), or when the record cannot be read (Err says why).
//
// It is safe for concurrent use.
func (g *Guard) Recorded(ctx context.Context, m *Message) Decision {
	call, d, ok := g.call(m)
	if !ok {
		return d
	}
	rec, err := g.guard.Get(ctx, call.Scope, call.Key)
	now := g.guard.Now() // leases and expiry are judged by the Guard's clock, as a delivery would be
	switch {
	case errors.Is(err, idemkit.ErrNotFound):
		return Decision{Action: Retry, Outcome: Failed, Err: errors.New("msgx: no record of the message: it did not take effect")}
	case errors.Is(err, idemkit.ErrInvalidKey) || errors.Is(err, idemkit.ErrUnstorable):
		return Decision{Action: DeadLetter, Outcome: Poison, Delay: g.backoff(m), Err: err}
	case err != nil:
		return Decision{Action: Retry, Outcome: Failed, Err: fmt.Errorf("msgx: reading the message's record: %w", err)}
	}
	held := rec.Status == idemkit.StatusProcessing && (rec.GID != "" || !rec.LeaseExpired(now))
	switch {
	case !held && rec.Expired(now):
		return Decision{Action: Retry, Outcome: Failed, Err: errors.New("msgx: the message's record expired")}
	case call.Fingerprint != "" && rec.Fingerprint != "" && call.Fingerprint != rec.Fingerprint:
		return Decision{Action: DeadLetter, Outcome: Poison, Delay: g.backoff(m), Err: idemkit.ErrPayloadMismatch}
	case held:
		left := max(rec.LeaseUntil.Sub(now), 0)
		return Decision{Action: Retry, Outcome: InFlight, Delay: left, Err: &idemkit.InFlightError{RetryAfter: left}}
	case !rec.Status.Terminal():
		return Decision{Action: Retry, Outcome: Failed, Err: fmt.Errorf("msgx: the message's record is %s: it did not take effect", rec.Status)}
	case rec.Status == idemkit.StatusSucceeded:
		return Decision{Action: Ack, Outcome: Duplicate, Replayed: true}
	default: // REJECTED
		return g.rejected(m, &idemkit.RejectedError{Message: rec.Error}, true)
	}
}
