package record

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
)

// TestGuardTxLazyFenceConcurrentNewKeys: Guard.Tx calls on distinct new keys whose functions ask for
// their fence while the cache vouches for the keys run side by side without failing. The lazy read
// locks the record it looks for; on InnoDB (REPEATABLE READ) a locking read of a missing row takes a
// gap lock, and two transactions holding the same gap deadlock when each inserts its record.
func TestGuardTxLazyFenceConcurrentNewKeys(t *testing.T) {
	rdb := testsvc.Redis(t)
	eachTxBackend(t, func(t *testing.T, b backend) {
		if b.name == "SQLite" {
			// The read makes a deferred SQLite transaction a reader before it writes, which fails
			// with SQLITE_BUSY under concurrent writers: as for DoTx, the documented remedy is
			// _txlock=immediate.
			b.open = func(t testing.TB, cfg *gorm.Config) *gorm.DB {
				db, err := gorm.Open(sqlite.Open(t.TempDir()+"/test.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate"), &gorm.Config{Logger: logger.Discard})
				must(t, err)
				return db
			}
		}
		f := newTxFixture(t, b, nil)
		f.hold = 100 * time.Millisecond
		g, err := idemkit.New(f.store, &idemkit.Options{Locker: lock.New(rdb, &lock.Options{Prefix: testsvc.Name("gap") + ":"})})
		must(t, err)
		const n = 6
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = f.txCall(g, "sql", fmt.Sprintf("new-%02d", i), nil)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("call %d on a new key: %v", i, err)
			}
		}
	})
}
