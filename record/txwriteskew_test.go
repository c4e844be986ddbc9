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

// TestTxWriteSkewIsAConflictNotAnOutage: two guard-owned Tx-mode calls on different keys whose
// functions each read what the other writes (a write skew) under SERIALIZABLE: PostgreSQL rolls one
// transaction back with a serialization failure, after both functions wrote: at its record's INSERT
// or at its COMMIT. No other
// attempt of that key won, and the call was answered "record store unavailable" (after some 150 ms
// of reading a record that was not there): an outage to alert on, for the business's own conflict.
// It is a retryable failure now that matches idemkit.ErrConflict (and IsConflict): nothing of it
// committed, and its retry runs (found by a defect hunt).
func TestTxWriteSkewIsAConflictNotAnOutage(t *testing.T) {
	db := testsvc.PostgresWith(t, nil, " default_transaction_isolation='serializable'")
	for _, mode := range []string{"Tx", "TxMark"} {
		t.Run(mode, func(t *testing.T) { testWriteSkew(t, newTxFixtureOn(t, db), mode) })
	}
}

func testWriteSkew(t *testing.T, f *txFixture, mode string) {
	ctx, cancel := context.WithTimeout(ctxb, 30*time.Second)
	defer cancel()
	var read, wrote sync.WaitGroup
	read.Add(2)
	wrote.Add(2)
	business := func(ctx context.Context, tx *gorm.DB, key string, both bool) error {
		var n int64
		if err := tx.Raw("SELECT count(*) FROM " + f.biz).Scan(&n).Error; err != nil {
			return err
		}
		if both {
			read.Done()
			read.Wait() // each has read before either writes
		}
		if err := tx.Exec("INSERT INTO "+f.biz+" (k, fence) VALUES (?, ?)", key, n).Error; err != nil {
			return err
		}
		if both {
			wrote.Done()
			wrote.Wait() // each has written before either commits: the failure comes after fn
		}
		return nil
	}
	call := func(key string, both bool) error {
		c := idemkit.Call{Scope: "skew-" + mode, Key: key}
		if mode == "TxMark" {
			return f.store.TxMark(ctx, f.guard, c, func(ctx context.Context, tx *gorm.DB) error { return business(ctx, tx, key, both) })
		}
		res, err := f.store.Tx(ctx, f.guard, c, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
			return []byte(key), business(ctx, tx, key, both)
		})
		if err == nil && (res.Replayed || string(res.Value) != key) {
			err = fmt.Errorf("answered %+v, want %s run", res, key)
		}
		return err
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, key := range []string{"a", "b"} {
		wg.Go(func() { errs[i] = call(key, true) })
	}
	wg.Wait()
	var failed []string
	for i, err := range errs {
		if err == nil {
			continue
		}
		failed = append(failed, []string{"a", "b"}[i])
		if errors.Is(err, idemkit.ErrStoreUnavailable) || !errors.Is(err, idemkit.ErrConflict) || !IsConflict(err) {
			t.Errorf("the call rolled back by the write skew: %v; want a conflict (ErrConflict, IsConflict), not the store unavailable", err)
		}
	}
	if len(failed) != 1 {
		t.Fatalf("errors %v; want one call rolled back by the serialization failure", errs)
	}
	if err := call(failed[0], false); err != nil {
		t.Fatalf("retry of %s: %v; want it run", failed[0], err)
	}
}
