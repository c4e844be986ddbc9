package record

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// TestSweeperBatchGoesOnPastATakeover: on MySQL/MariaDB a sweeper batch lists its keys with a plain
// read, then deletes (recovers) those rows re-checking the condition, so a record taken over in
// between is left alone and the batch acts on fewer rows than it listed. That batch is not the last:
// more records are due, and DeleteExpired (RecoverStale) goes on to them up to its limit, as the
// single DELETE (UPDATE) ... LIMIT it replaced did. It stopped there, so a sweep pass (which ends on
// a call that comes back short) left the rest for the next pass whenever one record of a batch was
// being taken over. The takeover is an open transaction that moved the first record's expiry (lease):
// the list still sees the record due, the statement waits for its lock and then sees it is not.
func TestSweeperBatchGoesOnPastATakeover(t *testing.T) {
	const due = 7
	for _, c := range []struct {
		name  string
		put   func(f *sweepFixture, i int) func(r *idemkit.Record)
		taken string // the column the takeover moves
		run   func(f *sweepFixture) (int, error)
	}{
		{"DeleteExpired", func(f *sweepFixture, i int) func(r *idemkit.Record) {
			return func(r *idemkit.Record) {
				r.Status, r.ExpiresAt = idemkit.StatusSucceeded, f.now.Add(-time.Duration(due-i)*time.Minute)
			}
		}, "expires_at", func(f *sweepFixture) (int, error) { return f.s.DeleteExpired(ctxb, f.now, 100) }},
		{"RecoverStale", func(f *sweepFixture, i int) func(r *idemkit.Record) {
			return func(r *idemkit.Record) { r.LeaseUntil = f.now.Add(-time.Duration(due-i) * time.Minute) }
		}, "lease_until", func(f *sweepFixture) (int, error) { return f.s.RecoverStale(ctxb, f.now, 100) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newSweepFixture(t, backends[0]) // MariaDB; batches of 2
			for i := range due {
				f.put("due"+string(rune('a'+i)), c.put(f, i))
			}
			sqlDB, err := f.db.DB()
			must(t, err)
			// Take over the record a list reads first (the one due the longest, and the first by primary
			// key), without committing.
			first := "duea"
			tx, err := sqlDB.BeginTx(ctxb, nil)
			must(t, err)
			defer tx.Rollback()
			if _, err := tx.Exec("UPDATE "+f.s.q.quoted+" SET "+c.taken+" = ? WHERE scope = 'sweep' AND idem_key = ?",
				millis(f.now.Add(time.Hour)), first); err != nil {
				t.Fatal(err)
			}
			type result struct {
				n   int
				err error
			}
			done := make(chan result, 1)
			go func() {
				n, err := c.run(f)
				done <- result{n, err}
			}()
			// Commit the takeover once the sweeper's statement waits for the record's lock.
			ctx, cancel := context.WithTimeout(ctxb, time.Minute)
			defer cancel()
			var res *result
			for res == nil {
				var waiting int
				// The statement after the list of keys has started (it then waits for the row, or
				// meets it committed): PROCESSLIST shows its text, prepared or not, where
				// INNODB_TRX's trx_query is empty for a prepared statement's.
				must(t, sqlDB.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND <> 'Sleep' AND "+
					"(INFO LIKE ? OR INFO LIKE ?)", "DELETE FROM `"+f.s.q.table+"`%", "UPDATE `"+f.s.q.table+"`%").Scan(&waiting))
				if waiting > 0 {
					break
				}
				select {
				case r := <-done:
					res = &r
				case <-time.After(5 * time.Millisecond):
				}
			}
			must(t, tx.Commit())
			if res == nil {
				r := <-done
				res = &r
			}
			// The takeover's record stays; every other one is swept.
			f.wantCount(c.name, res.n, res.err, due-1)
			r, err := f.get(first)
			must(t, err)
			if r.Status != idemkit.StatusProcessing && c.name == "RecoverStale" {
				t.Fatalf("the taken-over claim was recovered: %+v", r)
			}
		})
	}
}
