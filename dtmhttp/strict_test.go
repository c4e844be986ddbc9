package dtmhttp_test

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
)

// TestLockOutageIsNotAFailureUnderAStrictClassifier: the branch lock's Redis is down (FailOpen off):
// nothing ran, and DTM must call again (500). The Locker's error was classified by Options.IsPermanent:
// under one calling every unknown error permanent a saga action answered 409 FAILURE, and DTM rolled
// the whole saga back for a lock outage.
func TestLockOutageIsNotAFailureUnderAStrictClassifier(t *testing.T) {
	errTransient := errors.New("transient")
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	k := setup(t, nil, &dtmhttp.Options{
		Locker:      lock.New(down, nil),
		IsPermanent: func(err error) bool { return !errors.Is(err, errTransient) },
	})
	action := k.b.Handle(barrier.OpAction, dtmhttp.Gorm(k.bar, k.adjust(-1)))
	c := call{"saga", testsvc.Name("gid-"), "01", "action", `{"amount":30}`}
	expect(t, action, c, 500, "lock unavailable")
	if k.runCount() != 0 {
		t.Fatalf("business ran %d times without its lock", k.runCount())
	}
}
