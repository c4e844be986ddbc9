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
	"github.com/idemkit/idemkit/internal/testsvc"
)

// waitInsert waits until an INSERT into s's table runs in the server: the claim that waits for a
// held row (the transaction holding it is idle).
func waitInsert(t *testing.T, db *gorm.DB, s *Store) {
	t.Helper()
	for i := 0; ; i++ {
		var n int64
		must(t, db.Raw("SELECT COUNT(*) FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND info LIKE ?",
			"INSERT INTO %"+s.Table()+"%").Scan(&n).Error)
		if n > 0 {
			return
		}
		if i > 3000 {
			t.Fatal("no claim reached the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWithdrawnClaimsDoNotCrowdOutAnAbandonedOne: claims whose callers left while they waited for
// the group commit's next batch were withdrawn unsent, and claims of callers gone before they went
// out were never sent either, yet each took one of the Guard's 64 watches for abandoned claims, for
// the claim's whole lease. A mark whose caller left while its INSERT waited
// at the server, landing afterwards, then found no watch: it stood, and every retry got ErrDuplicate
// although its function never ran. A claim never sent is watched no more (found by a defect hunt).
func TestWithdrawnClaimsDoNotCrowdOutAnAbandonedOne(t *testing.T) {
	db := testsvc.MySQL(t, nil)
	table := testsvc.Name("t_withdrawn_")
	st, err := New(db, &Options{Table: table})
	must(t, err)
	testsvc.DropTable(t, db, table)
	must(t, st.CreateTable(ctxb))
	g, err := idemkit.New(st, &idemkit.Options{Lease: time.Hour})
	must(t, err)
	ok := func(context.Context) ([]byte, error) { return []byte("v"), nil }

	// A claim out alone, waiting for a held row: the claims after it queue for the next batch.
	release := holdRow(t, db, st, "held", true)
	first := make(chan error, 1)
	go func() {
		_, err := g.Do(ctxb, idemkit.Call{Scope: batchScope, Key: "held"}, ok)
		first <- err
	}()
	waitInsert(t, db, st)
	const queued = 70 // more than the Guard's 64 watches
	ctx, cancel := context.WithCancel(ctxb)
	var wg sync.WaitGroup
	for i := range queued {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := g.Do(ctx, idemkit.Call{Scope: batchScope, Key: fmt.Sprint("w", i)}, ok); !errors.Is(err, context.Canceled) {
				t.Errorf("claim withdrawn: %v, want context.Canceled", err)
			}
		}()
	}
	waitQueued(t, st.claims.Waiting, queued)
	cancel() // the queued claims are withdrawn, never sent
	wg.Wait()
	release()
	must(t, <-first)
	// Callers whose contexts ended before their claims went out, one at a time: never sent either.
	for i := range queued {
		if _, err := g.Do(ctx, idemkit.Call{Scope: batchScope, Key: fmt.Sprint("gone", i)}, ok); !errors.Is(err, context.Canceled) {
			t.Errorf("claim of a caller gone: %v, want context.Canceled", err)
		}
	}

	// A mark whose caller leaves while its INSERT waits at the server: it lands afterwards.
	release = holdRow(t, db, st, "late", true)
	call := idemkit.Call{Scope: batchScope, Key: "late"}
	ctx, cancel = context.WithCancel(ctxb)
	left := make(chan error, 1)
	go func() {
		left <- g.Mark(ctx, call, func(context.Context) error { t.Error("the abandoned mark's function ran"); return nil })
	}()
	waitInsert(t, db, st)
	cancel()
	t.Logf("the mark's caller left: %v", <-left)
	release() // the INSERT lands now

	var last error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ran := false
		if last = g.Mark(ctxb, call, func(context.Context) error { ran = true; return nil }); last == nil && ran {
			return
		}
	}
	rec, _ := st.Get(ctxb, batchScope, "late")
	t.Fatalf("retries after the abandoned mark landed: %v; record %s owner %q: not released, its function never ran",
		last, rec.Status, rec.Owner)
}
