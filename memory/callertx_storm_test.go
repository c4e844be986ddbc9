package memory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestCallerTxStorm: goroutines run transactions of their own on the memory Store, each guarding two
// neighbouring keys with DoTx, in either order, so that transactions deadlock; a victim (or any call
// that fails) rolls back. However the calls end, no key's function commits twice, and every key left
// without a commit runs once on a retry.
func TestCallerTxStorm(t *testing.T) {
	for _, locker := range []bool{false, true} {
		t.Run(fmt.Sprint("Locker=", locker), func(t *testing.T) {
			s := memory.NewStore()
			o := &idemkit.Options{Lease: 5 * time.Minute, TTL: time.Hour, FinishTimeout: time.Minute}
			if locker {
				o.Locker = memory.NewLocker(nil)
			}
			g, err := idemkit.New(s, o)
			if err != nil {
				t.Fatal(err)
			}
			const keys, workers, rounds = 24, 12, 60
			var committed [keys]atomic.Int32
			var victims atomic.Int32
			// A wait that ends with this deadline is a hang: a lost wake-up or a deadlock nobody found.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			do := func(tx idemkit.TxStore, k int, ran *bool) error {
				_, err := g.DoTx(ctx, tx, idemkit.Call{Scope: "s", Key: fmt.Sprint(k)}, func(context.Context) ([]byte, error) {
					*ran = true
					time.Sleep(time.Millisecond) // widen the window for the other order
					return []byte("v"), nil
				})
				return err
			}
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(w), 11))
					for range rounds {
						ks := [2]int{r.IntN(keys), 0}
						ks[1] = (ks[0] + 1) % keys
						if r.IntN(2) == 0 {
							ks[0], ks[1] = ks[1], ks[0]
						}
						tx, err := s.BeginTx(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						var ran [2]bool
						err = do(tx, ks[0], &ran[0])
						if err == nil {
							err = do(tx, ks[1], &ran[1])
						}
						if err != nil {
							if err := tx.Rollback(); err != nil {
								t.Error(err)
							}
							switch {
							case errors.Is(err, idemkit.ErrConflict):
								victims.Add(1)
							case errors.Is(err, idemkit.ErrInFlight), errors.Is(err, idemkit.ErrRollbackReplayed):
							default:
								t.Errorf("keys %v: %v", ks, err)
							}
							continue
						}
						if err := tx.Commit(); err != nil {
							t.Errorf("commit: %v", err)
							continue
						}
						for i, k := range ks {
							if ran[i] {
								committed[k].Add(1)
							}
						}
					}
				})
			}
			wg.Wait()
			for k := range keys {
				if n := committed[k].Load(); n > 1 {
					t.Errorf("key %d: %d transactions committed its function", k, n)
				}
				tx, err := s.BeginTx(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var ran bool
				if err := do(tx, k, &ran); err != nil {
					t.Fatalf("key %d after the storm: %v", k, err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				if ran == (committed[k].Load() == 1) {
					t.Errorf("key %d after %d commits: the retry ran %t", k, committed[k].Load(), ran)
				}
			}
			t.Logf("%d deadlock victims", victims.Load())
		})
	}
}
