package dtmhttp_test

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// countingLocker counts the Releases it is asked for.
type countingLocker struct {
	idemkit.Locker
	releases atomic.Int32
}

func (l *countingLocker) Release(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	l.releases.Add(1)
	return l.Locker.Release(ctx, key, token, result, ttl)
}

// TestNotSentAcquireReleasesNothing: a branch call whose context had ended before its lock's Acquire
// was sent (DTM gave up on the request, the server shutting down) took no lock, yet its release was
// queued in the background all the same: on a slow Redis such useless releases fill the Branches' 64
// background slots, and the release of a lock that did land is dropped (its branch answered 425 until
// LockTTL). An Acquire that matches idemkit.ErrNotSent is released no more, with FailOpen or without.
func TestNotSentAcquireReleasesNothing(t *testing.T) {
	k := setup(t, nil, nil)
	for _, failOpen := range []bool{false, true} {
		lk := &countingLocker{Locker: k.locker}
		b, err := dtmhttp.New(&dtmhttp.Options{Locker: lk, LockTTL: time.Minute, FailOpen: failOpen})
		if err != nil {
			t.Fatal(err)
		}
		c := call{"saga", testsvc.Name("gid-"), "01", "action", `{"amount":30}`}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		rec := httptest.NewRecorder()
		b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1))).ServeHTTP(rec, c.request().WithContext(ctx))
		wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := b.Wait(wctx); err != nil {
			t.Fatalf("Wait: %v", err)
		}
		wcancel()
		if n := lk.releases.Load(); n != 0 {
			t.Errorf("FailOpen %v: a branch call whose context ended before its Acquire (answered %d) released its lock %d times; it took none",
				failOpen, rec.Code, n)
		}
	}
}
