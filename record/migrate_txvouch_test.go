package record

import (
	"context"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
)

// TestMigratedV1KeysInTxModeWithALocker pins what the README's "Upgrading from v1" (step 0) tells
// operators: a key v1 finished is in no v2 cache, so Tx mode with a Locker at the default CacheTTL
// (= TTL, the cache vouching for the keys it does not hold) runs its function for a duplicate of it,
// rolls its writes back and replays the stored answer; with CacheTTL below TTL, the remedy the README
// gives, the record is read first and the function does not run.
func TestMigratedV1KeysInTxModeWithALocker(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		db := b.db(t, nil)
		s := v1Table(t, db)
		clock := idemtest.NewClock()
		now := clock.Now()
		for _, key := range []string{"vouched", "read-first"} {
			must(t, s.Insert(ctxb, &idemkit.Record{Scope: migrationScope, Key: key, Status: idemkit.StatusSucceeded,
				Fence: 1, Owner: "v1", Fingerprint: "fp", Response: []byte("v1's answer"), LeaseUntil: now.Add(-time.Minute),
				ExpiresAt: now.Add(time.Hour), CreatedAt: now.Add(-2 * time.Minute), UpdatedAt: now.Add(-time.Minute)}))
		}
		must(t, s.Migrate(ctxb))
		for _, c := range []struct {
			key      string
			cacheTTL time.Duration
			runs     bool
		}{{"vouched", 0, true}, {"read-first", time.Hour - time.Second, false}} {
			g, err := idemkit.New(s, &idemkit.Options{Now: clock.Now, TTL: time.Hour, CacheTTL: c.cacheTTL, Locker: memory.NewLocker(nil)})
			must(t, err)
			ran := false
			res, err := s.Tx(ctxb, g, idemkit.Call{Scope: migrationScope, Key: c.key, Fingerprint: "fp"},
				func(context.Context, *gorm.DB) ([]byte, error) { ran = true; return []byte("again"), nil })
			if err != nil || !res.Replayed || string(res.Value) != "v1's answer" {
				t.Fatalf("%s: %+v, %v; want v1's answer replayed", c.key, res, err)
			}
			if ran != c.runs {
				t.Fatalf("%s (CacheTTL %v): the function ran: %v, want %v", c.key, c.cacheTTL, ran, c.runs)
			}
			rec, err := s.Get(ctxb, migrationScope, c.key)
			if err != nil || string(rec.Response) != "v1's answer" || rec.Fence != 1 {
				t.Fatalf("%s: the record after the duplicate: %+v, %v", c.key, rec, err)
			}
		}
	})
}
