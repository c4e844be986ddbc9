package record

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
)

// TestSweeperAndTxTakeoversDoNotDeadlock: on MariaDB, a sweeper deleting expired records and
// recovering stale claims while Guard.Tx calls take the same records over deadlocks with none of
// them. The sweeper's statements used to walk the (status, expires_at) index and lock its entries
// before the rows, while a takeover locks the row (the primary key) and then moves its index entry:
// InnoDB rolled one of them back (error 1213), and the Tx caller got "store unavailable". Each round
// moves a manual clock past every record's expiry and turns a fifth of the records into stale claims,
// then runs the sweeper in a tight loop against concurrent takeovers of every key; it counts the
// errors, not time.
func TestSweeperAndTxTakeoversDoNotDeadlock(t *testing.T) {
	for _, b := range []backend{backends[0], multiBackend} { // MariaDB, plain and multi-statement
		t.Run(b.name, func(t *testing.T) { sweepAgainstTakeovers(t, b) })
	}
}

func sweepAgainstTakeovers(t *testing.T, b backend) {
	const (
		keys    = 600
		workers = 12
		rounds  = 12
	)
	db := b.db(t, nil)
	sqlDB, err := db.DB()
	must(t, err)
	sqlDB.SetMaxOpenConns(workers + 4)
	s := newTable(t, db)
	var clock atomic.Int64
	clock.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	g, err := idemkit.New(s, &idemkit.Options{TTL: time.Second, Lease: time.Second, Now: now})
	must(t, err)
	key := func(i int) string { return fmt.Sprintf("k%04d", i) }
	for i := range keys {
		must(t, s.Insert(ctxb, &idemkit.Record{Scope: "sw", Key: key(i), Status: idemkit.StatusSucceeded, Fence: 1, Owner: "o",
			ExpiresAt: now(), CreatedAt: now(), UpdatedAt: now()}))
		// A record that never expires after each key, so that no two keys share a gap of the
		// primary key: two takeovers whose records the sweeper deleted under them both re-insert
		// their records, each after a locking read of its missing row (a gap lock), and two
		// such inserts into one gap deadlock with each other, without the sweeper. That is not
		// what this test is about.
		must(t, s.Insert(ctxb, &idemkit.Record{Scope: "sw", Key: key(i) + "-live", Status: idemkit.StatusSucceeded, Fence: 1, Owner: "o",
			CreatedAt: now(), UpdatedAt: now()}))
	}

	var txErrs, sweepErrs, deadlocks, runs, deleted, recovered atomic.Int64
	var firstErr sync.Once
	report := func(what string, err error) {
		if IsConflict(err) || strings.Contains(err.Error(), "1213") || strings.Contains(strings.ToLower(err.Error()), "deadlock") {
			deadlocks.Add(1)
		}
		firstErr.Do(func() { t.Logf("first error: %s: %v", what, err) })
		if strings.HasPrefix(what, "Tx") {
			t.Logf("%s: %v", what, err)
		}
	}
	for range rounds {
		// Every record expires (the takeovers of the last round wrote TTL-long ones); the keys ending
		// in 1 or 3 become claims whose lease ran out before their expiry: stale, which RecoverStale
		// fails.
		clock.Add(3 * time.Second.Milliseconds())
		ms := clock.Load()
		must(t, db.Exec("UPDATE "+s.q.quoted+" SET status = 'PROCESSING', lease_until = ?, expires_at = ? WHERE idem_key LIKE ?",
			ms-1, ms+time.Hour.Milliseconds(), "%1").Error)
		must(t, db.Exec("UPDATE "+s.q.quoted+" SET status = 'PROCESSING', lease_until = ?, expires_at = ? WHERE idem_key LIKE ?",
			ms-1, ms+time.Hour.Milliseconds(), "%3").Error)

		ctx, stop := context.WithCancel(ctxb)
		var sweeper sync.WaitGroup
		sweeper.Add(1)
		go func() {
			defer sweeper.Done()
			for i := 0; ctx.Err() == nil; i++ {
				var n int
				var err error
				switch i % 3 {
				case 0, 1:
					n, err = s.DeleteExpired(ctxb, now(), keys)
					deleted.Add(int64(n))
				default:
					if i%2 == 0 {
						n, err = s.RecoverStale(ctxb, now(), keys)
					} else {
						var recs []*idemkit.Record
						recs, err = s.RecoverStaleClaims(ctxb, now(), keys)
						n = len(recs)
					}
					recovered.Add(int64(n))
				}
				if err != nil {
					sweepErrs.Add(1)
					report(fmt.Sprintf("sweeper (%d)", i%3), err)
				}
			}
		}()
		next := make(chan int)
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					res, err := s.Tx(ctxb, g, idemkit.Call{Scope: "sw", Key: key(i)}, func(ctx context.Context, tx *gorm.DB) ([]byte, error) {
						// A statement of the business in the transaction the Guard began.
						var one int
						if err := tx.Raw("SELECT 1").Scan(&one).Error; err != nil {
							return nil, err
						}
						return []byte("ok"), nil
					})
					switch {
					case err != nil:
						txErrs.Add(1)
						report("Tx "+key(i), err)
					case !res.Replayed:
						runs.Add(1)
					}
				}
			}()
		}
		// From both ends of the keys: the takeovers meet the sweeper wherever it is.
		for i := range keys / 2 {
			next <- i
			next <- keys - 1 - i
		}
		close(next)
		wg.Wait()
		stop()
		sweeper.Wait()
	}
	t.Logf("%d rounds of %d keys: %d runs, %d deleted, %d recovered by the sweeper; %d Tx errors, %d sweeper errors, %d deadlocks",
		rounds, keys, runs.Load(), deleted.Load(), recovered.Load(), txErrs.Load(), sweepErrs.Load(), deadlocks.Load())
	if txErrs.Load() > 0 || sweepErrs.Load() > 0 {
		t.Fatalf("%d Tx callers and %d sweeper passes failed (%d deadlocks)", txErrs.Load(), sweepErrs.Load(), deadlocks.Load())
	}
}
