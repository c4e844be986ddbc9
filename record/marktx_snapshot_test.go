package record

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
)

// TestMarkTxSnapshotDuplicateIsDuplicate: a MarkTx call in a PostgreSQL REPEATABLE READ transaction
// whose snapshot was taken before another attempt's mark committed, and whose duplicate the cache no
// longer answered (Redis restarted empty: FLUSHALL on a private server), met that mark with a
// serialization failure, which aborts the transaction. The call was answered "record store
// unavailable ... run it again" instead of ErrDuplicate. The claim now reads the record outside the
// aborted transaction and answers from it.
func TestMarkTxSnapshotDuplicateIsDuplicate(t *testing.T) {
	p := testsvc.StartRedis(t)
	rdb := redis.NewClient(p.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	db := backends[1].db(t, nil) // PostgreSQL
	s := newTable(t, db)
	g, err := idemkit.New(s, &idemkit.Options{Locker: lock.New(rdb, &lock.Options{Prefix: testsvc.Name("marksnap") + ":"})})
	must(t, err)
	call := idemkit.Call{Scope: "ship", Key: testsvc.Name("k")}
	var runs atomic.Int32
	mark := func(context.Context) error { runs.Add(1); return nil }
	snapshot, resume := make(chan struct{}), make(chan struct{})
	late := make(chan error, 1)
	go func() {
		late <- db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").Error; err != nil {
				return err
			}
			if err := tx.Exec("SELECT 1").Error; err != nil { // the snapshot
				return err
			}
			close(snapshot)
			<-resume
			return g.MarkTx(ctxb, s.WithTx(tx), call, mark)
		})
	}()
	<-snapshot
	if err := s.TxMark(ctxb, g, call, func(ctx context.Context, _ *gorm.DB) error { return mark(ctx) }); err != nil {
		t.Fatalf("the first mark: %v", err)
	}
	must(t, rdb.FlushAll(ctxb).Err()) // Redis restarted empty: the cached mark is gone
	close(resume)
	if err := <-late; !errors.Is(err, idemkit.ErrDuplicate) || errors.Is(err, idemkit.ErrStoreUnavailable) {
		t.Fatalf("MarkTx of a key marked after its transaction's snapshot: %v; want ErrDuplicate", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the mark's function ran %d times, want 1", n)
	}
}
