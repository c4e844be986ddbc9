package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/record"
)

// TestCheckersCatchViolations shows that the cluster tests' checks can fail: a storm over Guards that
// do not share their records (one in-memory Store each) runs keys more than once and answers their
// copies differently, and a ledger with a key applied twice breaks the bank's conservation check.
func TestCheckersCatchViolations(t *testing.T) {
	t.Run("Storm", func(t *testing.T) {
		guards := make([]*idemkit.Guard, 3)
		for i := range guards {
			g, err := idemkit.New(memory.NewStore(), nil)
			must(t, err)
			guards[i] = g
		}
		var mu sync.Mutex
		runs := map[string]int{}
		var seq atomic.Int64
		res := storm{Procs: 3, Dup: 3, Workers: 4, After: 50,
			Do: func(ctx context.Context, p int, key string) (string, error) {
				r, err := guards[p].Do(ctx, idemkit.Call{Scope: "s", Key: key}, func(context.Context) ([]byte, error) {
					mu.Lock()
					runs[key]++
					mu.Unlock()
					time.Sleep(time.Millisecond)
					return fmt.Appendf(nil, "%d", seq.Add(1)), nil
				})
				return string(r.Value), err
			},
			Retry: classify,
		}.run(t, "k")
		if v := runViolations(t, runs, res.Answers); v == 0 || res.Mismatched == 0 {
			t.Fatalf("unshared records: %d keys ran other than once, %d copies answered differently; the checks see nothing", v, res.Mismatched)
		}
	})
	t.Run("Bank", func(t *testing.T) {
		db := testsvc.MySQL(t, nil)
		b := &bank{accounts: testsvc.Name("acct_"), ledger: testsvc.Name("ledger_"), n: 4, initial: 1000}
		testsvc.DropTable(t, db, b.accounts)
		testsvc.DropTable(t, db, b.ledger)
		b.create(t, db)
		records := testsvc.Name("rec_")
		testsvc.DropTable(t, db, records)
		s, err := record.New(db, &record.Options{Table: records})
		must(t, err)
		must(t, s.CreateTable(context.Background()))
		now := time.Now()
		for _, k := range []string{"a", "b"} {
			must(t, s.Insert(context.Background(), &idemkit.Record{Scope: "bank", Key: k, Status: idemkit.StatusSucceeded, Fence: 1, CreatedAt: now}))
		}
		ctx := context.Background()
		must(t, b.transfer(ctx, db, "a", "va"))
		if v := b.check(t, db, records, map[string]string{"a": "va", "b": "vb"}); v == 0 {
			t.Fatal("a key answered but never applied went unnoticed")
		}
		must(t, b.transfer(ctx, db, "b", "vb"))
		if v := b.check(t, db, records, map[string]string{"a": "va", "b": "vb"}); v != 0 {
			t.Fatalf("a correct ledger: %d violations", v)
		}
		must(t, b.transfer(ctx, db, "b", "vb2")) // the same key applied twice
		if v := b.check(t, db, records, map[string]string{"a": "va", "b": "vb"}); v < 2 {
			t.Fatalf("a key applied twice: %d violations, want the duplicate and the balances", v)
		}
	})
}
