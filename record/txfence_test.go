package record

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
)

// TestGuardTxFenceAboveFailedAttempt: Guard.Tx on a key an Execute-mode attempt left FAILED hands
// its function (FenceFromContext) the fence the record commits with, above the failed attempt's —
// also when the Locker's cache vouches for the key and nothing is read before the function. It handed
// the function 1, the failed attempt's own fence, while the record committed with 2: a business
// write conditioned on the fence could not outrank the failed attempt's, and said otherwise than the
// record.
func TestGuardTxFenceAboveFailedAttempt(t *testing.T) {
	rdb := testsvc.Redis(t)
	eachTxBackend(t, func(t *testing.T, b backend) {
		f := newTxFixture(t, b, nil)
		g, err := idemkit.New(f.store, &idemkit.Options{Locker: lock.New(rdb, &lock.Options{Prefix: testsvc.Name("fence") + ":"})})
		must(t, err)
		for _, flavour := range []string{"gorm", "sql"} {
			key := "failed-" + flavour
			call := idemkit.Call{Scope: "gtx", Key: key}
			if _, err := g.Do(ctxb, call, func(context.Context) ([]byte, error) { return nil, errors.New("flaky") }); err == nil {
				t.Fatal("the failing attempt succeeded")
			}
			failed, err := f.store.Get(ctxb, "gtx", key)
			must(t, err)
			res, err := f.txCall(g, flavour, key, nil)
			if err != nil || res.Replayed {
				t.Fatalf("%s: Tx over a FAILED record: %+v, %v; want a fresh run", flavour, res, err)
			}
			rec := f.wantRecord(t, key, 1, idemkit.StatusSucceeded)
			var seen int64
			must(t, f.db.Raw("SELECT fence FROM "+f.biz+" WHERE k = ?", key).Row().Scan(&seen))
			if seen <= failed.Fence || seen != rec.Fence || res.Fence != rec.Fence {
				t.Fatalf("%s: the function saw fence %d, the record committed with %d (Result.Fence %d), the failed attempt had %d",
					flavour, seen, rec.Fence, res.Fence, failed.Fence)
			}
		}
	})
}
