package memory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestGuardCallInsideGuardedTx: a guarded transaction's function that makes another guarded call
// (another key: a Do, a Mark, a Tx of its own) runs it, as on record.Store, where a transaction locks
// the rows it touches. The memory Store's transactions held one write lock for the whole Store from
// BeginTx to Commit, so the inner call's claim waited for the outer transaction, which waited for
// the function: the inner call failed with its context's deadline (or hung without one), and the
// program that passed on MariaDB deadlocked in its unit tests.
func TestGuardCallInsideGuardedTx(t *testing.T) {
	s := memory.NewStore()
	g, err := idemkit.New(s, &idemkit.Options{Locker: memory.NewLocker(nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := g.Tx(ctx, s, idemkit.Call{Scope: "outer", Key: "k"}, func(ctx context.Context, _ idemkit.TxStore) ([]byte, error) {
		inner, err := g.Do(ctx, idemkit.Call{Scope: "inner", Key: "k"}, func(context.Context) ([]byte, error) { return []byte("in"), nil })
		if err != nil {
			return nil, err
		}
		if err := g.Mark(ctx, idemkit.Call{Scope: "mark", Key: "k"}, func(context.Context) error { return nil }); err != nil {
			return nil, err
		}
		nested, err := g.Tx(ctx, s, idemkit.Call{Scope: "nested", Key: "k"}, func(context.Context, idemkit.TxStore) ([]byte, error) {
			return []byte("nested"), nil
		})
		if err != nil {
			return nil, err
		}
		return append(inner.Value, nested.Value...), nil
	})
	if err != nil || string(res.Value) != "innested" {
		t.Fatalf("Tx whose function makes guarded calls on other keys: %+v, %v; want them run", res, err)
	}
	for _, scope := range []string{"outer", "inner", "mark", "nested"} {
		if rec, err := s.Get(ctx, scope, "k"); err != nil || rec.Status != idemkit.StatusSucceeded {
			t.Errorf("record of %s: %+v, %v; want SUCCEEDED", scope, rec, err)
		}
	}
}

// TestTxLocksOnlyItsKeys: an open transaction holds the keys it touched, as row locks do: writes of
// those keys outside it wait for its end, writes of other keys do not; reads never wait.
func TestTxLocksOnlyItsKeys(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	now := time.Unix(1_900_000_000, 0)
	rec := func(key string) *idemkit.Record {
		return &idemkit.Record{Scope: "s", Key: key, Status: idemkit.StatusProcessing, Fence: 1, Owner: "o",
			LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}
	}
	tx, err := s.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := tx.Insert(ctx, rec("held")); err != nil {
		t.Fatal(err)
	}
	bounded, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	if err := s.Insert(bounded, rec("free")); err != nil {
		t.Fatalf("insert of another key outside the open transaction: %v", err)
	}
	if _, err := s.Get(ctx, "s", "held"); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("read of the uncommitted key outside: %v, want ErrNotFound at once", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := s.Insert(short, rec("held")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("insert of the key the transaction holds: %v, want it to wait (DeadlineExceeded)", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Insert(ctx, rec("held")) }()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, idemkit.ErrExists) {
		t.Fatalf("insert that waited for the transaction: %v, want ErrExists (its record committed)", err)
	}
}

// TestTxDeadlockVictim: two transactions each waiting for a key the other holds end as on a database:
// one is rolled back with an error matching idemkit.ErrConflict (which the Guard recognises), and the
// other goes on.
func TestTxDeadlockVictim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := memory.NewStore()
	a, err := s.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, "s", "1"); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "s", "2"); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := a.Get(ctx, "s", "2") // waits for b
		waited <- err
	}()
	// b then wants a's key: one of them must give way.
	_, err = b.Get(ctx, "s", "1")
	if errors.Is(err, idemkit.ErrConflict) {
		// b is the victim: rolled back, its locks freed, a goes on.
		if err := <-waited; !errors.Is(err, idemkit.ErrNotFound) {
			t.Fatalf("the survivor's wait: %v, want it to read (ErrNotFound)", err)
		}
		if err := b.Commit(); !errors.Is(err, idemkit.ErrConflict) {
			t.Fatalf("commit of the victim: %v, want ErrConflict", err)
		}
		if err := a.Commit(); err != nil {
			t.Fatal(err)
		}
		return
	}
	// a had not started waiting yet, so b waited for a, and a's wait closed the cycle: a is the victim.
	if !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("two transactions waiting for each other: %v, want one rolled back with ErrConflict", err)
	}
	if err := <-waited; !errors.Is(err, idemkit.ErrConflict) {
		t.Fatalf("the other transaction's wait: %v, want ErrConflict", err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestTxEndsWithItsContext: as a database/sql transaction is rolled back when its context is done,
// whether or not its owner calls Rollback, so the keys a memory transaction locked are freed then:
// they stayed locked until Rollback, and a transaction its owner dropped after its context ended
// (a request that timed out, say) held its keys against every later write of them.
func TestTxEndsWithItsContext(t *testing.T) {
	s := memory.NewStore()
	now := time.Unix(1_900_000_000, 0)
	rec := &idemkit.Record{Scope: "s", Key: "k", Status: idemkit.StatusProcessing, Fence: 1, Owner: "o",
		LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour), CreatedAt: now, UpdatedAt: now}
	txCtx, cancel := context.WithCancel(context.Background())
	tx, err := s.BeginTx(txCtx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Insert(txCtx, rec); err != nil {
		t.Fatal(err)
	}
	cancel() // and nobody calls Rollback
	bounded, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if err := s.Insert(bounded, rec); err != nil {
		t.Fatalf("insert of the key a transaction locked, after its context ended: %v, want it free (the transaction rolled back)", err)
	}
	if err := tx.Commit(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit after the context ended: %v, want context.Canceled", err)
	}
	if _, err := tx.Get(context.Background(), "s", "other"); err == nil {
		t.Fatal("a statement of a transaction whose context ended ran")
	}
}

// afterFuncCtx is a context that counts the functions registered to run when it is done and not
// stopped yet (context.AfterFunc uses its AfterFunc method): what a transaction left registered on
// it stays alive as long as it.
type afterFuncCtx struct {
	context.Context
	live atomic.Int64
}

func (c *afterFuncCtx) Done() <-chan struct{} { return make(chan struct{}) }

func (c *afterFuncCtx) AfterFunc(func()) func() bool {
	c.live.Add(1)
	var once sync.Once
	return func() bool {
		stopped := false
		once.Do(func() { c.live.Add(-1); stopped = true })
		return stopped
	}
}

// TestTxEndLeavesNothingOnItsContext: a transaction that ended — committed, rolled back, or rolled
// back as a deadlock's victim — leaves nothing registered on its context. The victim's rollback did
// not stop the function BeginTx arranged for the context's end, so on a long-lived context (a
// worker's) every deadlock victim stayed reachable, its buffered writes with it, until that context
// ended — and on a context of a type of its own, one goroutine stayed for each.
func TestTxEndLeavesNothingOnItsContext(t *testing.T) {
	ctx := &afterFuncCtx{Context: context.Background()}
	s := memory.NewStore()
	begin := func() idemkit.TxStore {
		tx, err := s.BeginTx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	committed, rolledBack := begin(), begin()
	if err := committed.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := rolledBack.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := ctx.live.Load(); n != 0 {
		t.Fatalf("%d functions left on the context after a Commit and a Rollback", n)
	}

	bounded, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, b := begin(), begin()
	for tx, key := range map[idemkit.TxStore]string{a: "1", b: "2"} {
		if _, err := tx.Get(bounded, "s", key); !errors.Is(err, idemkit.ErrNotFound) {
			t.Fatal(err)
		}
	}
	waited := make(chan error, 1)
	go func() {
		_, err := a.Get(bounded, "s", "2")
		waited <- err
	}()
	_, errB := b.Get(bounded, "s", "1")
	errA := <-waited
	// One of them is the victim; each ends as the Guard ends it.
	for tx, err := range map[idemkit.TxStore]error{a: errA, b: errB} {
		switch {
		case errors.Is(err, idemkit.ErrConflict):
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
		case errors.Is(err, idemkit.ErrNotFound):
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("two transactions waiting for each other: %v", err)
		}
	}
	if n := ctx.live.Load(); n != 0 {
		t.Fatalf("%d functions left on the context after a deadlock's victim rolled back", n)
	}
}

// TestTxStatementRacingItsRollback: a statement of a transaction whose context ends while it runs
// either completes as the transaction held its keys or fails with the context's error; it never sees
// another writer's record of a key its transaction holds. The statement took the key's lock and then
// read the key, and the rollback by the context could free the key in between: a write outside the
// transaction that waited for it landed, and the statement read it (an Update failed with ErrFenced,
// an Insert with ErrExists, where the context's error was the answer). Readers outside the
// transaction keep the Store busy, so that the rollback does get in between, often.
func TestTxStatementRacingItsRollback(t *testing.T) {
	bg := context.Background()
	s := memory.NewStore()
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 3 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					_, _ = s.Get(bg, "other", "k")
				}
			}
		})
	}
	defer readers.Wait()
	defer close(stop)
	const rounds = 200
	saw := 0
	for i := range rounds {
		key := fmt.Sprintf("k%d", i)
		if err := s.Insert(bg, &idemkit.Record{Scope: "s", Key: key, Status: idemkit.StatusProcessing, Fence: 1, Owner: "o"}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		tx, err := s.BeginTx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held, err := tx.Get(bg, "s", key)
		if err != nil {
			t.Fatal(err)
		}
		outside := make(chan error, 1)
		go func() { // waits for the transaction's end
			next := *held
			next.Fence = 100
			outside <- s.Update(bg, &next, held.Version())
		}()
		go cancel()
		for {
			got, err := tx.Get(bg, "s", key)
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("round %d: %v, want context.Canceled", i, err)
				}
				break
			}
			if got.Fence != held.Fence {
				saw++
				break
			}
		}
		if err := <-outside; err != nil {
			t.Fatal(err)
		}
	}
	if saw > 0 {
		t.Fatalf("in %d of %d rounds a statement saw, in a key its transaction held, the write of another that waited for it", saw, rounds)
	}
}
