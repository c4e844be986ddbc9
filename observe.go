package idemkit

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Mode is how a call is guarded.
type Mode uint8

// Modes. See [Guard.Do], [Guard.Tx] and [Guard.DoTx] (both ModeTx), [Guard.Mark], [Guard.MarkTx] and
// [Guard.TxMark] (both ModeMarkTx).
const (
	ModeExecute Mode = iota
	ModeTx
	ModeMark
	ModeMarkTx
)

// marks reports whether m only marks keys (no stored result).
func (m Mode) marks() bool { return m == ModeMark || m == ModeMarkTx }

// atCommit reports whether m writes its record in a transaction (the Tx modes): a record read outside
// it shows nothing of an attempt in flight until that attempt commits.
func (m Mode) atCommit() bool { return m == ModeTx || m == ModeMarkTx }

func (m Mode) String() string {
	switch m {
	case ModeExecute:
		return "execute"
	case ModeTx:
		return "tx"
	case ModeMark:
		return "mark"
	case ModeMarkTx:
		return "mark_tx"
	}
	return "unknown"
}

// Outcome is what a guarded call came to.
type Outcome uint8

// Outcomes reported in an [Event].
const (
	// OutcomeExecuted: the call claimed the key and ran (Event.Status says how it finished).
	OutcomeExecuted Outcome = iota
	// OutcomeReplayed: a finished result (or stored rejection) was returned without running.
	OutcomeReplayed
	// OutcomeInFlight: another attempt holds the key.
	OutcomeInFlight
	// OutcomeMismatch: the key was used with another fingerprint.
	OutcomeMismatch
	// OutcomeDuplicate: Mark mode found the key marked.
	OutcomeDuplicate
	// OutcomeDetached: the claim was left PROCESSING for a reconciler (Claim.Detach).
	OutcomeDetached
	// OutcomeInvalid: the call was malformed (bad key or scope).
	OutcomeInvalid
	// OutcomeUnavailable: the Store (or the Locker, fail-closed) failed before anything ran.
	OutcomeUnavailable
)

var outcomeNames = [...]string{"executed", "replayed", "in_flight", "mismatch", "duplicate", "detached", "invalid", "unavailable"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Event describes one finished guarded call, for an [Observer].
type Event struct {
	Mode  Mode
	Scope string
	// StoredScope is the scope as Stores hold it (namespaced, hashed when longer than MaxStoredLen
	// bytes, see [Address]); "" when the call was refused for an invalid scope. A call refused for
	// its key, fingerprint, gid or branch id has it.
	StoredScope string
	// Key is a short hash of the key, or the key itself when Options.LogKeys is set.
	Key     string
	Outcome Outcome
	// Status is the record's state at the end: the finish written by an executed call, the state
	// replayed, or the mark a Mark-mode duplicate met. "" when no record was read or written, and for
	// a finish that was not written (fenced, or the Tx modes' failed writes).
	Status Status
	// Fence of the claim, of the replayed record or of the mark a duplicate met; 0 when none.
	Fence int64
	// Cached: the replay came from the Locker's cache.
	Cached bool
	// Conflict: the claim's insert met an existing record (a duplicate reached the Store).
	Conflict bool
	// Takeover: the call took over a FAILED, expired or lease-expired record.
	Takeover bool
	// Fenced: the finish was refused because the record was no longer the claim's (taken over by a
	// newer attempt, recovered by a sweeper, released or purged by an operator).
	Fenced bool
	// FailOpen: a Locker error was skipped (Options.FailOpen).
	FailOpen bool
	// Err is the error the call returned, if any.
	Err error
	// Duration is the whole call's, from its start to its end.
	Duration time.Duration
	// ClaimDuration is how long the call took to get its claim (the Locker's acquire and the Store's
	// insert or takeover; in the Tx modes, where the record is written after the function, the
	// Locker's acquire, the record's read and the transaction's begin), from its start; 0 when it got
	// no claim (a replay, an in-flight answer...).
	// Set only when the Guard has an Observer or a Logger enabled at warn level.
	ClaimDuration time.Duration
}

// Observer watches a Guard's calls. Implementations must be safe for concurrent use.
type Observer interface {
	// Start is called when a call begins. It returns the context the call continues with (e.g.
	// carrying a span) and a function the Guard calls exactly once, when the call ends.
	Start(ctx context.Context, mode Mode, scope string) (context.Context, func(*Event))
}

// report ends a call: it fills the duration, logs and hands the event to the observer.
func (g *Guard) report(ctx context.Context, ev *Event, key string, end func(*Event), start time.Time) {
	if !start.IsZero() {
		ev.Duration = g.opts.Now().Sub(start)
	}
	lvl := slog.LevelDebug
	if ev.FailOpen || ev.Fenced || ev.Outcome == OutcomeUnavailable || errors.Is(ev.Err, ErrStoreUnavailable) {
		lvl = slog.LevelWarn
	}
	logging := g.opts.Logger.Enabled(ctx, lvl)
	if logging || end != nil {
		ev.Key = key
		if !g.opts.LogKeys {
			ev.Key = keyHash(ev.Scope, key)
		}
	}
	if logging {
		attrs := []slog.Attr{
			slog.String("mode", ev.Mode.String()),
			slog.String("scope", ev.Scope),
			slog.String("key", ev.Key),
			slog.String("outcome", ev.Outcome.String()),
			slog.Int64("fence", ev.Fence),
			slog.Duration("duration", ev.Duration),
		}
		if ev.Status != "" {
			attrs = append(attrs, slog.String("status", string(ev.Status)))
		}
		if ev.Takeover {
			attrs = append(attrs, slog.Bool("takeover", true))
		}
		if ev.Fenced {
			attrs = append(attrs, slog.Bool("fenced", true))
		}
		if ev.FailOpen {
			attrs = append(attrs, slog.Bool("fail_open", true))
		}
		if ev.Err != nil {
			attrs = append(attrs, slog.String("error", ev.Err.Error()))
		}
		g.opts.Logger.LogAttrs(ctx, lvl, "idemkit call", attrs...)
	}
	if end != nil {
		end(ev)
	}
}
