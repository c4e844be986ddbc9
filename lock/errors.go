package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// errNilReply reports a nil reply, which none of the scripts returns.
var errNilReply = errors.New("unexpected nil reply")

// interpretError translates an error from running a script, once for the package: a nil reply
// (redis.Nil) becomes an unexpected-reply error rather than a "not found" or "not locked" outcome,
// and everything else (network errors, server errors, injected failures) is wrapped with what was
// being done. When ctx is done, its error is wrapped too so errors.Is(err, context.Canceled) or
// context.DeadlineExceeded holds even when the client reported only a socket timeout. No result of
// interpretError matches idemkit.ErrLocked or idemkit.ErrLockNotHeld.
func interpretError(ctx context.Context, doing string, err error) error {
	if errors.Is(err, redis.Nil) {
		err = errNilReply
	}
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(d) {
		// The socket deadline (set from ctx's) can fire a moment before ctx's own timer.
		cerr = context.DeadlineExceeded
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("lock: %s: %w: %w", doing, cerr, err)
	}
	return fmt.Errorf("lock: %s: %w", doing, err)
}

// unexpectedReply reports a reply of the wrong type: a script from another version, or a proxy
// that rewrote it.
func unexpectedReply(doing string, v any) error {
	return fmt.Errorf("lock: %s: unexpected reply %T(%v) from Redis", doing, v, v)
}
