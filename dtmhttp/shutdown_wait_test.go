package dtmhttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// blipLocker's first Releases fail without taking effect, as on connections Redis dropped.
type blipLocker struct {
	idemkit.Locker
	failing atomic.Int32
}

func (l *blipLocker) Release(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	if l.failing.Add(-1) >= 0 {
		return errors.New("write tcp 127.0.0.1:50000->127.0.0.1:6379: connection reset by peer")
	}
	return l.Locker.Release(ctx, key, token, result, ttl)
}

// TestWaitLetsAGracefulShutdownReleaseTheBranchLocks: a branch lock whose release failed is released
// again in the background, but nothing could wait for it: a process that stopped gracefully exited at
// once, the lock stayed, and DTM's retries of the branch were answered 425 until LockTTL ran out.
// Branches.Wait waits for that work.
func TestWaitLetsAGracefulShutdownReleaseTheBranchLocks(t *testing.T) {
	k := setup(t, nil, nil)
	lk := &blipLocker{Locker: k.locker}
	lk.failing.Store(3) // released again after 10, 20 and 40 ms
	b, err := dtmhttp.New(&dtmhttp.Options{Locker: lk, LockTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	c := call{"saga", testsvc.Name("gid-"), "01", "action", `{"amount":30}`}
	expect(t, b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1))), c, 200, "SUCCESS")
	// The process shuts down.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	// DTM's retry, through another process (k.b shares k.locker and the key layout): answered at once.
	rec := httptest.NewRecorder()
	k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1))).ServeHTTP(rec, c.request())
	if rec.Code != http.StatusOK {
		t.Fatalf("the retry after the shutdown answered %d %s, want 200 (the lock released)", rec.Code, rec.Body)
	}
	if k.runCount() != 1 {
		t.Fatalf("business ran %d times, want 1", k.runCount())
	}
}
