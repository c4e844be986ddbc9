package msgx_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/msgx"
	"github.com/idemkit/idemkit/record"
)

// txFixture is a msgx.Guard in Tx mode over a real database: a record table and an effects table
// without a unique key (at most one row per message is the guard's promise, not the schema's).
type txFixture struct {
	db      *gorm.DB
	records *record.Store
	guard   *idemkit.Guard
	mg      *msgx.Guard
	effects string
}

func newTx(t *testing.T, db *gorm.DB, gopts *idemkit.Options, opts *msgx.Options) *txFixture {
	t.Helper()
	f := &txFixture{db: db, effects: testsvc.Name("t_eff_")}
	table := testsvc.Name("t_rec_")
	var err error
	if f.records, err = record.New(db, &record.Options{Table: table}); err != nil {
		t.Fatal(err)
	}
	testsvc.DropTable(t, db, table)
	if err := f.records.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	testsvc.DropTable(t, db, f.effects)
	if err := db.Exec("CREATE TABLE " + f.effects + " (msg_id VARCHAR(128) NOT NULL, amount BIGINT NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	if f.guard, err = idemkit.New(f.records, gopts); err != nil {
		t.Fatal(err)
	}
	if f.mg, err = msgx.New(f.guard, opts); err != nil {
		t.Fatal(err)
	}
	return f
}

// handler writes the message's effect, then fails with fail (nil: succeeds).
func (f *txFixture) handler(fail error) msgx.HandleFunc {
	return f.mg.Tx(f.db, f.records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
		if err := tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 10).Error; err != nil {
			return err
		}
		return fail
	})
}

func (f *txFixture) effectsOf(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := f.db.Raw("SELECT count(*) FROM "+f.effects+" WHERE msg_id = ?", id).Row().Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *txFixture) status(t *testing.T, id string) idemkit.Status {
	t.Helper()
	rec, err := f.guard.Get(context.Background(), "orders/worker", id)
	if errors.Is(err, idemkit.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec.Status
}

func databases(t *testing.T) map[string]func() *gorm.DB {
	return map[string]func() *gorm.DB{
		"mysql":    func() *gorm.DB { return testsvc.MySQL(t, nil) },
		"postgres": func() *gorm.DB { return testsvc.Postgres(t, nil) },
	}
}

func TestTxCommitsEffectAndRecordTogether(t *testing.T) {
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			f := newTx(t, open(), nil, nil)
			ctx := context.Background()
			want(t, f.handler(nil)(ctx, msg("t1")), msgx.Ack, msgx.Processed)
			want(t, f.handler(nil)(ctx, msg("t1")), msgx.Ack, msgx.Duplicate)
			if n := f.effectsOf(t, "t1"); n != 1 {
				t.Fatalf("%d effects, want 1", n)
			}
			if s := f.status(t, "t1"); s != idemkit.StatusSucceeded {
				t.Fatalf("status %q", s)
			}
		})
	}
}

func TestTxRetryableErrorRollsBackEverything(t *testing.T) {
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			f := newTx(t, open(), nil, nil)
			ctx := context.Background()
			d := f.handler(errBoom)(ctx, msg("t2"))
			want(t, d, msgx.Retry, msgx.Failed)
			if n, s := f.effectsOf(t, "t2"), f.status(t, "t2"); n != 0 || s != "" {
				t.Fatalf("after a retryable failure: %d effects, record %q; want none of either", n, s)
			}
			want(t, f.handler(nil)(ctx, msg("t2")), msgx.Ack, msgx.Processed)
			if n := f.effectsOf(t, "t2"); n != 1 {
				t.Fatalf("%d effects after the retry, want 1", n)
			}
		})
	}
}

// A permanent failure leaves the record REJECTED and none of the handler's writes.
func TestTxPermanentErrorRecordsRejectedWithoutEffects(t *testing.T) {
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			f := newTx(t, open(), nil, nil)
			ctx := context.Background()
			d := f.handler(idemkit.Permanent(errBoom))(ctx, msg("t3"))
			want(t, d, msgx.DeadLetter, msgx.Rejected)
			if !errors.Is(d.Err, errBoom) || d.Replayed {
				t.Fatalf("decision %v", d)
			}
			if n, s := f.effectsOf(t, "t3"), f.status(t, "t3"); n != 0 || s != idemkit.StatusRejected {
				t.Fatalf("%d effects, record %q; want 0 and REJECTED", n, s)
			}
			d = f.handler(nil)(ctx, msg("t3")) // the redelivery is not run
			want(t, d, msgx.DeadLetter, msgx.Rejected)
			if !d.Replayed || f.effectsOf(t, "t3") != 0 {
				t.Fatalf("redelivery %v ran or was not replayed", d)
			}
		})
	}
}

// Concurrent deliveries of one message id (a duplicate publish, or a redelivery while the first is
// still running) take effect once; the others end Duplicate, or InFlight and then Duplicate.
func TestTxConcurrentDuplicatesTakeEffectOnce(t *testing.T) {
	for name, open := range databases(t) {
		for _, locked := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/locker=%v", name, locked), func(t *testing.T) {
				var gopts *idemkit.Options
				if locked {
					rdb := testsvc.Redis(t)
					prefix := testsvc.Name("msgx:")
					testsvc.CleanRedis(t, rdb, prefix)
					gopts = &idemkit.Options{Locker: lock.New(rdb, &lock.Options{Prefix: prefix})}
				}
				f := newTx(t, open(), gopts, &msgx.Options{RetryDelay: 10 * time.Millisecond})
				h := f.mg.Tx(f.db, f.records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
					if err := tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 10).Error; err != nil {
						return err
					}
					time.Sleep(20 * time.Millisecond) // hold the transaction open while the others arrive
					return nil
				})
				const ids, copies = 5, 6
				var mu sync.Mutex
				outcomes, retries := map[msgx.Outcome]int{}, map[msgx.Outcome]int{}
				var wg sync.WaitGroup
				for i := range ids * copies {
					wg.Go(func() {
						m := msg(fmt.Sprintf("c%d", i%ids))
						for attempt := 1; ; attempt++ {
							m.Attempt = attempt
							d := h(context.Background(), m)
							if d.Action == msgx.Ack {
								mu.Lock()
								outcomes[d.Outcome]++
								mu.Unlock()
								return
							}
							mu.Lock()
							retries[d.Outcome]++
							mu.Unlock()
							// InFlight, or Failed when the database picked this transaction as a
							// deadlock victim (MariaDB, concurrent inserts of one key): redelivered.
							if d.Action != msgx.Retry || attempt > 100 {
								t.Errorf("delivery of %s: %v", m.ID, d)
								return
							}
							time.Sleep(d.Delay)
						}
					})
				}
				wg.Wait()
				for i := range ids {
					if n := f.effectsOf(t, fmt.Sprintf("c%d", i)); n != 1 {
						t.Errorf("c%d: %d effects, want 1", i, n)
					}
				}
				if outcomes[msgx.Processed] != ids || outcomes[msgx.Duplicate] != ids*(copies-1) {
					t.Errorf("final outcomes %v, want %d processed and %d duplicates", outcomes, ids, ids*(copies-1))
				}
				t.Logf("final outcomes %v, retried deliveries %v", outcomes, retries)
			})
		}
	}
}

// A delivery whose key another delivery finished while its handler ran (no Locker: both read no
// record, both run) finds the record when it writes its own: its writes roll back and it ends with
// the stored outcome on this very delivery — Duplicate (acknowledged), or Rejected replayed — not a
// retry.
func TestTxKeyFinishedWhileRunningIsReplayed(t *testing.T) {
	for name, open := range databases(t) {
		for _, tc := range []struct {
			name    string
			second  error // the outcome of the delivery that finishes first
			action  msgx.Action
			outcome msgx.Outcome
			status  idemkit.Status
		}{
			{"succeeded", nil, msgx.Ack, msgx.Duplicate, idemkit.StatusSucceeded},
			{"rejected", idemkit.Permanent(errBoom), msgx.DeadLetter, msgx.Rejected, idemkit.StatusRejected},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				f := newTx(t, open(), nil, nil)
				ctx := context.Background()
				started, finished := make(chan struct{}), make(chan struct{})
				slow := f.mg.Tx(f.db, f.records, func(ctx context.Context, tx *gorm.DB, m *msgx.Message) error {
					if err := tx.Exec("INSERT INTO "+f.effects+" (msg_id, amount) VALUES (?, ?)", m.ID, 10).Error; err != nil {
						return err
					}
					close(started)
					<-finished // the other delivery runs and commits meanwhile
					return nil
				})
				first := make(chan msgx.Decision, 1)
				go func() { first <- slow(ctx, msg("t5")) }()
				<-started
				d := f.handler(tc.second)(ctx, msg("t5"))
				close(finished)
				if tc.second == nil {
					want(t, d, msgx.Ack, msgx.Processed)
				} else {
					want(t, d, msgx.DeadLetter, msgx.Rejected)
				}
				d = <-first
				want(t, d, tc.action, tc.outcome)
				if !d.Replayed {
					t.Fatalf("decision %v not marked Replayed", d)
				}
				wantEffects := 1
				if tc.second != nil {
					wantEffects = 0
				}
				if n, s := f.effectsOf(t, "t5"), f.status(t, "t5"); n != wantEffects || s != tc.status {
					t.Fatalf("%d effects, record %q; want %d and %s", n, s, wantEffects, tc.status)
				}
			})
		}
	}
}

// TestTxUnstorableFingerprintIsHashed: in Tx mode too, a binary fingerprint is stored as its hash
// instead of failing every delivery before the handler runs.
func TestTxUnstorableFingerprintIsHashed(t *testing.T) {
	binary := func(m *msgx.Message) string { s := sha256.Sum256(m.Data); return string(s[:]) }
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			f := newTx(t, open(), nil, &msgx.Options{Fingerprint: binary})
			ctx := context.Background()
			want(t, f.handler(nil)(ctx, msg("fp")), msgx.Ack, msgx.Processed)
			want(t, f.handler(nil)(ctx, msg("fp")), msgx.Ack, msgx.Duplicate)
			other := msg("fp")
			other.Data = []byte(`{"id":2}`)
			want(t, f.handler(nil)(ctx, other), msgx.DeadLetter, msgx.Poison)
			if n := f.effectsOf(t, "fp"); n != 1 {
				t.Fatalf("%d effects, want 1", n)
			}
		})
	}
}
