package dtmhttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
)

// TestBusinessOutlivesTheCallUntilLockTTL: when DTM gives up on the call of an op that must not fail
// (its request timeout), the business is not cancelled with the request — it goes on, so that one
// slower than DTM's timeout commits and the next delivery finds it done — but only until LockTTL
// after the call arrived. The business of an op that may fail (a saga action) is cancelled with its
// request: DTM takes an action it gave up on for one that did not run.
func TestBusinessOutlivesTheCallUntilLockTTL(t *testing.T) {
	serveOp := func(t *testing.T, transType, op string, ttl time.Duration, business func(ctx context.Context, req *dtmhttp.Request) error) {
		t.Helper()
		b, err := dtmhttp.New(&dtmhttp.Options{LockTTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		h := b.Handle(op, func(ctx context.Context, req *dtmhttp.Request) (barrier.Outcome, error) {
			return barrier.Proceed, business(ctx, req)
		})
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan struct{})
		go func() {
			defer close(served)
			h.ServeHTTP(httptest.NewRecorder(), call{transType, "gid-callerleft", "01", op, `{}`}.request().WithContext(ctx))
		}()
		cancel() // DTM gave up on the call
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Fatal("the handler did not return")
		}
	}

	t.Run("goes on", func(t *testing.T) {
		var err error
		serveOp(t, "tcc", barrier.OpConfirm, time.Minute, func(ctx context.Context, req *dtmhttp.Request) error {
			<-req.HTTP.Context().Done()
			err = ctx.Err()
			return nil
		})
		if err != nil {
			t.Fatalf("the business's context ended with the call: %v", err)
		}
	})
	t.Run("until LockTTL", func(t *testing.T) {
		var cause error
		serveOp(t, "tcc", barrier.OpConfirm, 100*time.Millisecond, func(ctx context.Context, req *dtmhttp.Request) error {
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
			case <-time.After(10 * time.Second):
			}
			return ctx.Err()
		})
		if !errors.Is(cause, context.Canceled) || !strings.Contains(fmt.Sprint(cause), "LockTTL") {
			t.Fatalf("the business was not cancelled once LockTTL passed after the call ended: %v", cause)
		}
	})
	t.Run("not an action", func(t *testing.T) {
		var err error
		serveOp(t, "saga", barrier.OpAction, time.Minute, func(ctx context.Context, req *dtmhttp.Request) error {
			<-req.HTTP.Context().Done()
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-time.After(10 * time.Second):
			}
			return nil
		})
		if err == nil {
			t.Fatal("the business of a saga action outlived its call")
		}
	})
}
