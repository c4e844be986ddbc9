package msgx

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/record"
)

// Guard turns message handlers into idempotent [HandleFunc]s on an [idemkit.Guard]. It is safe for
// concurrent use; create one per consumer configuration and share it between workers.
type Guard struct {
	guard *idemkit.Guard
	opts  Options
	scope atomic.Pointer[string] // the last queue found to be a valid scope (see call)
}

// New returns a Guard over guard, configured by opts (nil for defaults). It returns an error when
// guard is nil or an option is invalid.
func New(guard *idemkit.Guard, opts *Options) (*Guard, error) {
	if guard == nil {
		return nil, errors.New("msgx: nil idemkit.Guard")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.Scope != "" {
		// Checked with the Guard's own limits (Options.MaxKeyLen): a scope it refuses would make
		// every message Poison.
		if _, err := guard.Address(o.Scope, "k"); err != nil {
			return nil, fmt.Errorf("msgx: invalid options: Scope: %w", err)
		}
	}
	return &Guard{guard: guard, opts: o}, nil
}

// Execute returns a HandleFunc that runs h at most once per message key in Execute mode
// ([idemkit.Guard.Do]): the record is claimed in its own commit, h runs, the outcome is recorded,
// and only then is the message acknowledged. Use it when h's effects are outside the record's
// database (another database, an HTTP call, an email); if h committed them but the process died
// before the outcome was recorded, the redelivery runs h again once the claim's lease ran out, so
// make such effects idempotent by key or fence (idemkit.FenceFromContext) — or use [Guard.Tx].
// It panics if h is nil.
func (g *Guard) Execute(h Handler) HandleFunc {
	if h == nil {
		panic("msgx: Execute with a nil Handler")
	}
	return func(ctx context.Context, m *Message) Decision {
		call, d, ok := g.call(m)
		if !ok {
			return d
		}
		var herr error
		ran := false
		res, err := g.guard.Do(ctx, call, func(ctx context.Context) ([]byte, error) {
			ran = true
			herr = g.safely(func() error { return h(ctx, m) })
			return nil, herr
		})
		if ran && !sameError(err, herr) {
			// Do returns h's error as it is (nil on success) only when that is the recorded
			// outcome. Anything else — the finish failed (ErrStoreUnavailable, or a deadline on a
			// hung database), the claim was fenced — left the record unfinished: h's error, even a
			// permanent one, is not this delivery's outcome, and it is retried (as runTx does).
			return Decision{Action: Retry, Outcome: Failed, Delay: g.backoff(m), Err: err}
		}
		return g.decide(ctx, m, res, err, herr)
	}
}

// Tx returns a HandleFunc that runs h at most once per message key in Tx mode, through
// [idemkit.Guard.Tx]: the Guard begins a transaction on db, runs h in it, writes the message's
// record once (final status, through records bound to the transaction) beside h's writes and
// commits, so h's writes and the record commit together or not at all; the message is acknowledged
// after the commit. A crash at any point leaves either both (the redelivery is a Duplicate,
// acknowledged without running) or neither (it runs again). A duplicate of a finished key is
// answered before h runs (from the Locker's cache, or one read of the record); one that another
// delivery finished while h ran has h's writes rolled back and gets the stored outcome (Duplicate,
// or Rejected replayed). A permanent failure rolls h's writes back and the Guard records REJECTED on
// its own. records must be a Store on db's database. It panics if an argument is nil.
func (g *Guard) Tx(db *gorm.DB, records *record.Store, h TxHandler) HandleFunc {
	if db == nil || records == nil || h == nil {
		panic("msgx: Tx with a nil db, records or TxHandler")
	}
	return func(ctx context.Context, m *Message) Decision {
		call, d, ok := g.call(m)
		if !ok {
			return d
		}
		res, herr, err := runTx(ctx, g.guard, db, records, call, func(ctx context.Context, tx *gorm.DB) error {
			return g.safely(func() error { return h(ctx, tx, m) })
		})
		if conflictVictim(records, herr) {
			// The database rolled h's transaction back to resolve a contention (h's statement was a
			// deadlock's victim, a serialization failure): not the message's failure, whatever the
			// Guard's IsPermanent says (Guard.Tx recorded nothing), and not counted against
			// Options.MaxAttempts, as a COMMIT's write conflict is not. Retried.
			return Decision{Action: Retry, Outcome: Failed, Delay: g.backoff(m), Err: err}
		}
		return g.decide(ctx, m, res, err, herr)
	}
}

// call builds the guarded call of m, or the decision without running: Poison when m has no usable
// key, a misconfiguration (see [ErrMisconfigured]) when its queue cannot be the scope or the broker
// cannot count the attempts Options.MaxAttempts needs.
func (g *Guard) call(m *Message) (idemkit.Call, Decision, bool) {
	if m.AttemptsUncounted && g.opts.MaxAttempts > 2 {
		return idemkit.Call{}, g.misconfigured(m, fmt.Errorf("%w: queue %q keeps no delivery count (a RabbitMQ classic queue?): "+
			"MaxAttempts %d cannot be enforced there; use a quorum queue, or MaxAttempts 0, 1 or 2", ErrMisconfigured, m.Queue, g.opts.MaxAttempts)), false
	}
	scope := g.opts.Scope
	if scope == "" {
		scope = m.Queue
		if last := g.scope.Load(); last == nil || *last != scope {
			if _, err := g.guard.Address(scope, "k"); err != nil {
				return idemkit.Call{}, g.misconfigured(m, fmt.Errorf("%w: the queue %q cannot be the scope (set Options.Scope): %w", ErrMisconfigured, scope, err)), false
			}
			g.scope.Store(&scope)
		}
	}
	key := m.ID
	var err error
	if g.opts.Key != nil {
		// Run on the adapter's worker: a panic (a malformed payload) would end the process, and the
		// redelivery the next one's.
		if pe := recovering(func() { key, err = g.opts.Key(m) }); pe != nil {
			err = pe
		}
	}
	switch {
	case err != nil:
		err = fmt.Errorf("%w: %w", ErrNoKey, err)
	case key == "":
		err = ErrNoKey
	}
	if err != nil {
		g.opts.Logger.Warn("msgx: message without a usable key, dead-lettering it", "queue", m.Queue, "subject", m.Subject, "error", err)
		return idemkit.Call{}, Decision{Action: DeadLetter, Outcome: Poison, Delay: g.backoff(m), Err: err}, false
	}
	c := idemkit.Call{Scope: scope, Key: key}
	if g.opts.Fingerprint != nil {
		var fp string
		if pe := recovering(func() { fp = g.opts.Fingerprint(m) }); pe != nil {
			err = fmt.Errorf("msgx: Options.Fingerprint: %w", pe)
			g.opts.Logger.Warn("msgx: message cannot be fingerprinted, dead-lettering it", "queue", m.Queue, "subject", m.Subject, "error", err)
			return idemkit.Call{}, Decision{Action: DeadLetter, Outcome: Poison, Delay: g.backoff(m), Err: err}, false
		}
		// A fingerprint no Store could hold (a raw binary hash, a long canonical form) is hashed:
		// refused, it would fail every delivery of the message before the handler runs.
		c.Fingerprint = idemkit.StorableText(fp)
	}
	return c, Decision{}, true
}

// misconfigured is the decision for a delivery that shows the consumer is misconfigured: it is not
// run and not dead-lettered — the adapters give it back to the broker and stop consuming.
func (g *Guard) misconfigured(m *Message, err error) Decision {
	g.opts.Logger.Error("msgx: consumer misconfigured, not handling the message", "queue", m.Queue, "subject", m.Subject, "error", err)
	return Decision{Action: Retry, Outcome: Failed, Delay: g.opts.MaxRetryDelay, Err: err}
}

// safely runs f, turning a panic into a *PanicError, marked idemkit.Retryable: no business failure,
// whatever the Guard's Options.IsPermanent says of it. f's error is described here too: one whose
// Error panics (a nil *T returned as a non-nil error) would panic when the Guard records its text,
// out of the adapter's worker, and is f's panic.
func (g *Guard) safely(f func() error) error {
	var err error
	if pe := recovering(func() {
		if err = f(); err != nil {
			_ = err.Error()
		}
	}); pe != nil {
		g.opts.Logger.Error("msgx: handler panicked", "panic", pe.Value, "stack", string(pe.Stack))
		return idemkit.Retryable(pe)
	}
	return err
}

// recovering runs f and returns its panic, if any, as a *PanicError.
func recovering(f func()) (pe *PanicError) {
	defer func() {
		if v := recover(); v != nil {
			pe = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	f()
	return nil
}

// decide maps the guarded call's result to a Decision. herr is the handler's own error when it ran
// and that error is the recorded outcome (Execute and runTx leave it nil otherwise), so it is
// classified as it is: one that wraps idemkit.ErrStoreUnavailable, ErrLockUnavailable or ErrFenced
// (a handler returning an inner guarded call's error) is the handler's failure, not a failure to
// record it. ctx is the delivery's: once it has ended (the consumer stopping), a retryable failure is
// not counted against Options.MaxAttempts — the handler was cut short, whatever error it answered
// with (a gRPC status, a driver's own error need not wrap ctx's).
func (g *Guard) decide(ctx context.Context, m *Message, res idemkit.Result, err, herr error) Decision {
	switch {
	case err == nil && res.Replayed:
		return Decision{Action: Ack, Outcome: Duplicate, Replayed: true}
	case err == nil:
		return Decision{Action: Ack, Outcome: Processed}
	case herr != nil && g.guard.IsPermanent(herr):
		return g.rejected(m, err, false)
	case herr == nil && errors.Is(err, idemkit.ErrRejected):
		return g.rejected(m, err, true)
	case herr == nil && errors.Is(err, idemkit.ErrInFlight):
		var ife *idemkit.InFlightError
		hold := time.Duration(0)
		if errors.As(err, &ife) {
			hold = ife.RetryAfter
		}
		return Decision{Action: Retry, Outcome: InFlight, Delay: min(max(hold, g.opts.RetryDelay), g.backoff(m)), Err: err}
	case herr == nil && (errors.Is(err, idemkit.ErrPayloadMismatch) || errors.Is(err, idemkit.ErrInvalidKey) ||
		errors.Is(err, idemkit.ErrUnstorable)):
		// The same delivery would fail the same way forever: ErrUnstorable here is a value of the
		// call the Store refuses, or an outcome recorded REJECTED without it (replayed as such).
		g.opts.Logger.Warn("msgx: message cannot be guarded, dead-lettering it", "queue", m.Queue, "subject", m.Subject, "error", err)
		return Decision{Action: DeadLetter, Outcome: Poison, Delay: g.backoff(m), Err: err}
	case herr != nil && g.opts.MaxAttempts > 0 && m.Attempt >= g.opts.MaxAttempts && ctx.Err() == nil:
		// The record is FAILED: should dead-lettering fail, the redelivery runs the handler again.
		return Decision{Action: DeadLetter, Outcome: GaveUp, Delay: g.backoff(m), Err: err}
	default: // a retryable handler error, an outcome that could not be recorded, cancellation
		return Decision{Action: Retry, Outcome: Failed, Delay: g.backoff(m), Err: err}
	}
}

func (g *Guard) rejected(m *Message, err error, replayed bool) Decision {
	if g.opts.OnReject == AckRejected {
		return Decision{Action: Ack, Outcome: Rejected, Replayed: replayed, Err: err}
	}
	return Decision{Action: DeadLetter, Outcome: Rejected, Delay: g.backoff(m), Replayed: replayed, Err: err}
}

// backoff is the retry delay of m's delivery attempt: RetryDelay doubled per earlier attempt, capped
// by MaxRetryDelay — MaxRetryDelay itself for a redelivery whose attempts the broker does not count
// (its Attempt stays 2, so the delay could never grow).
func (g *Guard) backoff(m *Message) time.Duration {
	if m.AttemptsUncounted {
		return g.opts.MaxRetryDelay
	}
	d := g.opts.RetryDelay
	for i := 1; i < m.Attempt && d < g.opts.MaxRetryDelay; i++ {
		if d > g.opts.MaxRetryDelay/2 {
			return g.opts.MaxRetryDelay // doubled, it would pass the cap (or overflow, for a cap past half the longest Duration)
		}
		d *= 2
	}
	return min(d, g.opts.MaxRetryDelay)
}

// DataFingerprint is an Options.Fingerprint: the hex SHA-256 of the payload. With it, a message id
// reused for another payload is dead-lettered as Poison instead of being acknowledged as a duplicate.
func DataFingerprint(m *Message) string {
	sum := sha256.Sum256(m.Data)
	return hex.EncodeToString(sum[:])
}
