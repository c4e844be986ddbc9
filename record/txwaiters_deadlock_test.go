package record

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestGuardTxWaitersAfterHolderRollback: Guard.Tx duplicates whose record INSERTs wait on a record
// another transaction inserted and then rolled back (a DoTx caller rolling back its transaction) must
// end with one commit and every other call replaying it, as the README's guarantee says ("concurrent
// duplicates' INSERTs serialise on the primary key, one commits and the others roll back and replay its
// answer"). On MariaDB the waiters deadlock once the holder rolls back; the victims read the record
// (writeFailed) before the survivor commits and answer ErrStoreUnavailable instead.
func TestGuardTxWaitersAfterHolderRollback(t *testing.T) {
	for _, b := range []backend{backends[0], backends[1], multiBackend} {
		t.Run(b.name, func(t *testing.T) {
			f := newTxFixture(t, b, nil)
			for round := range 5 {
				key := fmt.Sprintf("w%d", round)
				call := idemkit.Call{Scope: "gtx", Key: key}
				inserted, release := make(chan struct{}), make(chan struct{})
				holder := make(chan error, 1)
				go func() {
					holder <- f.db.Transaction(func(tx *gorm.DB) error {
						_, err := f.guard.DoTx(ctxb, f.store.WithTx(tx), call, func(context.Context) ([]byte, error) { return []byte("holder"), nil })
						if err != nil {
							return err
						}
						close(inserted)
						<-release
						return errors.New("the caller rolls back")
					})
				}()
				<-inserted
				var mu sync.Mutex
				var fresh, replayed int
				var wg sync.WaitGroup
				for range 10 {
					wg.Go(func() {
						// A Guard whose cache vouches for the key: no read, the function runs.
						g, err := idemkit.New(f.store, &idemkit.Options{Locker: memory.NewLocker(nil)})
						must(t, err)
						res, err := f.txCall(g, "gorm", key, nil)
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err == nil && !res.Replayed:
							fresh++
						case err == nil && res.Replayed && string(res.Value) == "paid "+key:
							replayed++
						default:
							t.Errorf("%s: %+v, %v; want the answer or its replay", key, res, err)
						}
					})
				}
				time.Sleep(200 * time.Millisecond) // the duplicates' INSERTs wait on the holder's
				close(release)
				<-holder
				wg.Wait()
				if n := bizRows(t, f.db, f.biz, key); n != 1 || fresh != 1 {
					t.Fatalf("%s: %d business rows, %d fresh answers; want 1 and 1", key, n, fresh)
				}
			}
		})
	}
}
