package record

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
)

// TestMigratePostgresDuplicatesDuringIndexBuild: README "Upgrading from v1" says the PostgreSQL
// migration runs "with writers running throughout". While CREATE UNIQUE INDEX CONCURRENTLY builds the
// new primary key's index (ready for inserts, not yet valid: not an ON CONFLICT arbiter), concurrent
// duplicates of one key in Tx mode (no Locker) must still be answered (one runs, the others replay or
// are in flight), not fail: the index refuses a duplicate with an error that aborts the transaction,
// which the Store reports as ErrConflict and the Guard answers from the other writer's record (found
// by a defect hunt: they failed with "current transaction is aborted").
func TestMigratePostgresDuplicatesDuringIndexBuild(t *testing.T) {
	db := backends[1].db(t, nil)
	sqlDB, _ := db.DB()
	sqlDB.SetMaxOpenConns(20)
	s := v1Table(t, db)
	table := s.q.name
	g, err := idemkit.New(s, &idemkit.Options{Lease: 10 * time.Second, TTL: time.Hour})
	must(t, err)

	// An old snapshot keeps the index build waiting with its index ready but not valid.
	holder := db.Begin(&sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	var one int
	must(t, holder.Raw("SELECT 1").Scan(&one).Error)
	done := make(chan error, 1)
	go func() { done <- s.Migrate(ctxb) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var ready, valid bool
		err := db.Raw("SELECT i.indisready, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = ?",
			table+"_pk_v2").Row().Scan(&ready, &valid)
		if err == nil && ready && !valid {
			break
		}
		if time.Now().After(deadline) {
			holder.Rollback()
			t.Fatalf("the index build never reached ready-not-valid: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}

	msg := storm(s, g)
	holder.Rollback()
	must(t, <-done)
	if msg != "" {
		t.Fatal(msg)
	}
}

// storm runs 300 rounds of 4 concurrent Tx-mode calls of one key, and says what failed.
func storm(s *Store, g *idemkit.Guard) string {
	var failed atomic.Int32
	var first atomic.Value
	for round := range 300 {
		key := fmt.Sprintf("k-%d", round)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				<-start
				_, err := s.Tx(ctxb, g, idemkit.Call{Scope: "POST /pay", Key: key}, func(context.Context, *gorm.DB) ([]byte, error) {
					return []byte("ok"), nil
				})
				if err != nil && !errors.Is(err, idemkit.ErrInFlight) {
					failed.Add(1)
					first.CompareAndSwap(nil, fmt.Sprintf("%s: %v", key, err))
				}
			})
		}
		close(start)
		wg.Wait()
	}
	if n := failed.Load(); n > 0 {
		return fmt.Sprintf("%d guarded Tx calls failed (of 1200, 4 concurrent per key); first: %v", n, first.Load())
	}
	return ""
}
