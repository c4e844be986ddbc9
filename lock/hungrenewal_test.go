package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/redis/go-redis/v9"
)

// TestWatchdogRenewsTheRecordWhileRedisHangs: with FailOpen a Locker error does not end a claim, and
// the watchdog of an Execute-mode call renews the record's lease with the Store alone. But a
// Redis that does not answer at all (stopped, cut off without a reset, blocked by a slow command; here
// CLIENT PAUSE) held each renewal's Refresh until the renewal's deadline, and the record's write then
// failed on the spent context: the lease was never renewed, and the function was cancelled with
// ErrLockLost ("renewal failing: context deadline exceeded") although the Store was up. The Locker
// gets at most half the renewal's time now; without FailOpen the function is still cancelled.
func TestWatchdogRenewsTheRecordWhileRedisHangs(t *testing.T) {
	const lease, work, pause = 400 * time.Millisecond, 1200 * time.Millisecond, 1500
	p := testsvc.StartRedis(t)
	rdb := redis.NewClient(p.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	admin := redis.NewClient(p.Options())
	t.Cleanup(func() { _ = admin.Close() })
	ctx := testCtx(t)
	must(t, admin.Ping(ctx).Err())
	l := lock.New(rdb, nil)

	for i, c := range []struct {
		mode     idemkit.Mode
		failOpen bool
	}{{idemkit.ModeExecute, true}, {idemkit.ModeExecute, false}} {
		name := fmt.Sprintf("%s, FailOpen %v", c.mode, c.failOpen)
		store := memory.NewStore()
		g := newGuard(t, store, &idemkit.Options{Locker: l, FailOpen: c.failOpen, Watchdog: true, Lease: lease, FinishTimeout: 5 * time.Second})
		call := idemkit.Call{Scope: "s", Key: fmt.Sprint("k", i)}
		var cause, leaseErr error
		fn := func(ctx context.Context) error {
			// Redis answers nobody from now on, for longer than the function runs.
			if err := admin.Do(ctx, "client", "pause", pause, "all").Err(); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
				return cause
			case <-time.After(work):
			}
			// Three leases later, the record is still the claim's and its lease was moved along.
			rec, err := g.Get(context.Background(), call.Scope, call.Key)
			switch {
			case err != nil:
				leaseErr = err
			case c.mode == idemkit.ModeExecute && !rec.LeaseUntil.After(time.Now()):
				leaseErr = fmt.Errorf("lease ran out at %s", rec.LeaseUntil)
			case !rec.ExpiresAt.After(time.Now()):
				leaseErr = fmt.Errorf("mark expired at %s", rec.ExpiresAt)
			}
			return nil
		}
		var err error
		if c.mode == idemkit.ModeMark {
			err = g.Mark(ctx, call, fn)
		} else {
			_, err = g.Do(ctx, call, func(ctx context.Context) ([]byte, error) { return []byte("v"), fn(ctx) })
		}
		switch {
		case !c.failOpen && !errors.Is(cause, idemkit.ErrLockLost):
			t.Errorf("%s: the function's context ended with %v, want ErrLockLost", name, cause)
		case !c.failOpen:
		case err != nil || cause != nil || leaseErr != nil:
			t.Errorf("%s: the call answered %v, the function's context %v, the record %v; want the lease renewed and the call carried on", name, err, cause, leaseErr)
		}
		time.Sleep(pause*time.Millisecond - work) // Redis answers again
	}
}
