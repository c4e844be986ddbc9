package dtmhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
)

// Request is one branch call as a [Business] sees it.
type Request struct {
	// HTTP is the incoming request; its body has been read into Payload.
	HTTP *http.Request
	// Branch is the branch read from the query string. It counts the barrier calls made with it
	// (barrier_id 01, 02, ...), so use it for the barrier calls of this request only. It is nil when
	// the payload of an op that must not fail was larger than Options.MaxBody: only [Gorm] and [Redis]
	// run such a call (they let the barrier skip a null compensation first); a barrier call of a
	// Business written by hand fails, and the call is answered as for the payload error.
	Branch *barrier.Branch
	// Payload is the request body: the payload given to DTM for this branch.
	Payload []byte

	// branch and payloadErr hold the branch and the payload error while Branch is nil; seen records
	// that Gorm or Redis took them.
	branch     *barrier.Branch
	payloadErr error
	seen       bool
}

// deferred returns the branch to run the barrier with, and the payload error a business must return
// instead of running when the barrier lets the call through (nil when the payload was read).
func (r *Request) deferred() (*barrier.Branch, error) {
	if r.payloadErr == nil {
		return r.Branch, nil
	}
	r.seen = true
	return r.branch, r.payloadErr
}

// Business runs one branch op behind a barrier and reports the barrier's decision (0 when it has
// none). Its error decides the answer: nil → 200; idemkit.ErrInFlight or dtmcli.ErrOngoing → 425;
// dtmcli.ErrFailure or permanent (see [Options.IsPermanent]) → 409 for an op that may fail, 500 for
// one that must not; anything else → 500. Wrapped errors count. [Gorm] and [Redis]
// build the usual ones; write one by hand to hold the local transaction yourself (with
// barrier.Gorm.CallOutcome inside your own db.Transaction).
type Business func(ctx context.Context, req *Request) (barrier.Outcome, error)

type requestKey struct{}

// RequestFromContext returns the branch call a Business runs for, from the context the handler
// passes it (and [Gorm] and [Redis] pass on to the user's function).
func RequestFromContext(ctx context.Context) (*Request, bool) {
	r, ok := ctx.Value(requestKey{}).(*Request)
	return r, ok
}

// ErrMalformedPayload: a branch payload could not be decoded or was larger than Options.MaxBody. It
// comes wrapped in idemkit.Permanent: DTM sends the same payload on every retry.
var ErrMalformedPayload = errors.New("dtmhttp: malformed branch payload")

// Decode decodes a JSON payload into a T. An empty payload gives T's zero value; a []byte T gets the
// payload itself. It returns idemkit.Permanent(ErrMalformedPayload ...) when the payload is not a
// JSON encoding of a T (including trailing data).
func Decode[T any](payload []byte) (T, error) {
	var v T
	if len(payload) == 0 {
		return v, nil
	}
	if raw, ok := any(&v).(*[]byte); ok {
		*raw = append([]byte(nil), payload...)
		return v, nil
	}
	if err := json.Unmarshal(payload, &v); err != nil {
		return v, idemkit.Permanent(fmt.Errorf("%w: %w", ErrMalformedPayload, err))
	}
	return v, nil
}

// GormFunc is a branch business on a gorm database: it makes its writes through tx, the local
// transaction that also holds the barrier rows. ctx carries the [Request].
type GormFunc[T any] func(ctx context.Context, tx *gorm.DB, payload T) error

// Gorm returns a Business that opens a local transaction on bar's database, records the branch in the
// barrier and, on the first delivery only, decodes the payload into a T and runs fn in the same
// transaction; it commits when fn returns nil and rolls back (barrier rows included) when fn fails or
// panics. A duplicate, hanging or null-compensation delivery commits only the barrier rows and
// succeeds without decoding or running anything.
//
// Gorm panics when bar or fn is nil.
func Gorm[T any](bar *barrier.Gorm, fn GormFunc[T]) Business {
	if bar == nil || fn == nil {
		panic("dtmhttp: Gorm: nil barrier or function")
	}
	return func(ctx context.Context, req *Request) (barrier.Outcome, error) {
		br, perr := req.deferred()
		failed := false // the payload or fn failed, not the barrier or the transaction
		out, err := bar.TransactionOutcome(ctx, br, func(tx *gorm.DB) error {
			if perr != nil { // oversized: the barrier did not skip the call, so it cannot run
				failed = true
				return perr
			}
			p, err := Decode[T](req.Payload)
			if err == nil {
				err = fn(ctx, tx, p)
			}
			failed = err != nil
			return err
		})
		if err != nil && !failed {
			// The database's error (begin, barrier, commit), not the business's answer: DTM must
			// call again, whatever Options.IsPermanent says.
			err = idemkit.Retryable(err)
		}
		return out, err
	}
}

// RedisFunc builds the business change of a branch on Redis from its payload: the script, keys and
// arguments the barrier runs atomically with its own keys. ctx carries the [Request].
type RedisFunc[T any] func(ctx context.Context, payload T) (*barrier.RedisCall, error)

// Redis returns a Business that decodes the payload into a T, has fn build the change, and runs it
// behind the Redis barrier in one script: on the first delivery only, atomically with the barrier
// keys. A business error reply starting with FAILURE is a permanent failure (409 for an op that may
// fail).
//
// A payload that does not decode into a T, or is larger than Options.MaxBody, is refused (409) for an
// op that may fail. For an op that must not fail — the compensation of an action refused for that same
// payload, say — the barrier decides first, without fn (which needs the payload to name its keys): a
// null compensation or a repeated delivery is answered 200, and the payload error only when the barrier
// lets the call through, with the barrier keys left unset so that a fixed handler runs it. That
// barrier call has no business keys, so in [barrier.LayoutTagged] its keys hash on the gid (its own
// hash tag when it has one; see barrier.RedisCall.HashTag): it finds the keys of the op it undoes only
// when they hashed there too, and otherwise takes that op for one that never ran — its undo skipped.
// Decode every op of a branch into the same T and serve them with the same Options.MaxBody (the payload
// is the same bytes; do not lower MaxBody while transactions are in flight), so that an op that cannot
// read it is always undoing one that could not either.
//
// Redis panics when bar or fn is nil.
func Redis[T any](bar *barrier.Redis, fn RedisFunc[T]) Business {
	if bar == nil || fn == nil {
		panic("dtmhttp: Redis: nil barrier or function")
	}
	return func(ctx context.Context, req *Request) (barrier.Outcome, error) {
		br, err := req.deferred()
		var p T
		if err == nil {
			p, err = Decode[T](req.Payload)
		}
		if err != nil {
			if br == nil || MayFail(br.TransType, br.Op) {
				return 0, err
			}
			return redisUnreadable(ctx, bar, br, err)
		}
		call, err := fn(ctx, p)
		if err != nil {
			return 0, err
		}
		res, err := bar.Call(ctx, br, call)
		return res.Outcome, redisError(err)
	}
}

// unreadable is the business of an op that must not fail run on a payload it cannot read: it refuses
// every call the barrier lets through, before writing anything, so the barrier keys stay unset.
var unreadable = barrier.NewScript(`return redis.error_reply('FAILURE: idemkit: branch payload unreadable')`)

// redisUnreadable lets the barrier decide on a call of an op that must not fail whose payload could
// not be read (perr): a duplicate, hanging or null-compensation delivery succeeds without it; a call
// the barrier lets through fails with perr.
func redisUnreadable(ctx context.Context, bar *barrier.Redis, br *barrier.Branch, perr error) (barrier.Outcome, error) {
	res, err := bar.Call(ctx, br, &barrier.RedisCall{Script: unreadable})
	if errors.Is(err, barrier.ErrBusinessFailure) {
		return res.Outcome, perr
	}
	return res.Outcome, redisError(err)
}

// redisError classifies the error of a Redis barrier call: one with no reply from Redis (a connection
// or timeout error) is an outage, not the business's answer, so DTM must call again, whatever
// Options.IsPermanent says.
func redisError(err error) error {
	var reply redis.Error
	if err != nil && !errors.As(err, &reply) && !idemkit.IsPermanent(err) && !errors.Is(err, barrier.ErrInvalidBranch) {
		return idemkit.Retryable(err)
	}
	return err
}
