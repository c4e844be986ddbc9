package memory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// TestTxStress runs transactions that each read and update one to three of a few keys, counting in
// each record's Fence, from several goroutines at once, and checks what row locks promise: every key's
// count is the number of committed updates of it (none lost, none from a transaction that did not
// commit), a statement never sees another's write of a key its transaction holds, transactions that
// lock keys in one order are never deadlock victims, no wait hangs, and no lock outlives its
// transaction. Modes: keys in random order (deadlocks happen), in sorted order (they cannot), with
// contexts cancelled before a statement or at any moment (their transactions roll back meanwhile),
// and with updates outside any transaction mixed in.
//
// A statement of a transaction whose context ended while it ran read the key after the rollback had
// freed it, and so saw another writer's record: an Update then failed with ErrFenced (an Insert with
// ErrExists) where its transaction still held the key when it began, and its error should have been
// the context's. Seen under the race detector in the async modes.
func TestTxStress(t *testing.T) {
	for _, mode := range []string{"random", "sorted", "cancel", "sorted-cancel", "async", "sorted-async", "outside"} {
		t.Run(mode, func(t *testing.T) {
			const keys, workers, rounds = 5, 8, 500
			sorted := mode == "sorted" || mode == "sorted-cancel" || mode == "sorted-async"
			s := NewStore()
			key := func(i int) string { return fmt.Sprintf("k%d", i) }
			for i := range keys {
				if err := s.Insert(context.Background(), &idemkit.Record{Scope: "s", Key: key(i), Status: idemkit.StatusProcessing, Owner: "o"}); err != nil {
					t.Fatal(err)
				}
			}
			// A wait that ends with this context's deadline is a hang: a lost wake-up or a deadlock
			// nobody found.
			hang, stop := context.WithTimeout(context.Background(), time.Minute)
			defer stop()
			var want [keys]atomic.Int64
			var commits, victims, cancelled atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(w), uint64(len(mode))))
					for range rounds {
						if mode == "outside" && w%3 == 0 {
							k := r.IntN(keys)
							for {
								cur, err := s.Get(hang, "s", key(k))
								if err != nil {
									t.Error(err)
									return
								}
								next := *cur
								next.Fence++
								if err = s.Update(hang, &next, cur.Version()); err == nil {
									want[k].Add(1)
									break
								}
								if !errors.Is(err, idemkit.ErrFenced) {
									t.Errorf("update outside a transaction: %v", err)
									return
								}
							}
							continue
						}
						txCtx, cancel := context.WithCancel(context.Background())
						tx, err := s.BeginTx(txCtx)
						if err != nil {
							t.Error(err)
							cancel()
							return
						}
						picked := r.Perm(keys)[:1+r.IntN(3)]
						if sorted {
							slices.Sort(picked)
						}
						cancelAt := -1 // cancel before this statement (len(picked): before Commit)
						if (mode == "cancel" || mode == "sorted-cancel") && r.IntN(3) == 0 {
							cancelAt = r.IntN(len(picked) + 1)
						}
						async := (mode == "async" || mode == "sorted-async") && r.IntN(2) == 0
						if async {
							yields := r.IntN(3)
							go func() {
								for range yields {
									runtimeYield()
								}
								cancel()
							}()
						}
						var failed error
						for j, k := range picked {
							if j == cancelAt {
								cancel()
							}
							cur, err := tx.Get(hang, "s", key(k))
							if err != nil {
								failed = err
								break
							}
							next := *cur
							next.Fence++
							if failed = tx.Update(hang, &next, cur.Version()); failed != nil {
								break
							}
						}
						if failed == nil {
							if cancelAt == len(picked) {
								cancel()
							}
							if failed = tx.Commit(); failed == nil {
								commits.Add(1)
								for _, k := range picked {
									want[k].Add(1)
								}
							}
						} else if err := tx.Rollback(); err != nil {
							t.Errorf("rollback: %v", err)
						}
						switch {
						case failed == nil:
						case errors.Is(failed, idemkit.ErrConflict) && !sorted:
							victims.Add(1)
						case errors.Is(failed, context.Canceled) && (cancelAt >= 0 || async):
							cancelled.Add(1)
						default:
							t.Errorf("transaction over %v (cancelled before statement %d, async %t): %v", picked, cancelAt, async, failed)
						}
						cancel()
					}
				})
			}
			wg.Wait()
			for i := range keys {
				rec, err := s.Get(context.Background(), "s", key(i))
				if err != nil {
					t.Fatal(err)
				}
				if rec.Fence != want[i].Load() {
					t.Errorf("key %d counts %d updates, %d committed", i, rec.Fence, want[i].Load())
				}
			}
			s.mu.Lock()
			if n := len(s.locks); n != 0 {
				t.Errorf("%d keys still locked after every transaction ended", n)
			}
			s.mu.Unlock()
			t.Logf("%d commits, %d deadlock victims, %d cancelled", commits.Load(), victims.Load(), cancelled.Load())
		})
	}
}

// runtimeYield lets other goroutines run.
func runtimeYield() { runtime.Gosched() }
