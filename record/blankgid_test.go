package record

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/memory"
)

type sweepTarget interface {
	idemkit.Store
	RecoverStale(ctx context.Context, now time.Time, limit int) (int, error)
	DeleteExpired(ctx context.Context, now time.Time, limit int) (int, error)
}

// TestBlankGIDIsAGID: a claim tied to a global transaction whose gid is blank (" ") is a GID
// record to the Guard (never taken over, listed by Pending). The sweeper must leave it alone on
// every backend, as it does on memory and PostgreSQL (found by a defect hunt: MariaDB's PAD SPACE
// collation compared " " equal to "", so the sweeper recovered it and a duplicate ran again).
func TestBlankGIDIsAGID(t *testing.T) {
	run := func(t *testing.T, st sweepTarget) {
		clock := idemtest.NewClock()
		g, err := idemkit.New(st, &idemkit.Options{Now: clock.Now, Lease: time.Second, TTL: time.Hour})
		must(t, err)
		cl, _, err := g.Begin(ctxb, idemkit.Call{Scope: "s", Key: "k", GID: " ", Result: []byte("order-1")})
		must(t, err)
		cl.Detach(ctxb)
		clock.Advance(2 * time.Second)
		now := clock.Now()
		pend, err := g.Pending(ctxb, now, 10, "s")
		must(t, err)
		n, err := st.RecoverStale(ctxb, now, 10)
		must(t, err)
		_, derr := g.Do(ctxb, idemkit.Call{Scope: "s", Key: "k"}, func(context.Context) ([]byte, error) { return []byte("second run"), nil })
		if len(pend) != 1 || n != 0 || !errors.Is(derr, idemkit.ErrInFlight) {
			t.Fatalf("gid \" \" record: Pending listed %d (want 1), RecoverStale recovered %d (want 0), duplicate Do: %v (want ErrInFlight)", len(pend), n, derr)
		}
	}
	t.Run("memory", func(t *testing.T) { run(t, memory.NewStore()) })
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := setup(t, b)
		run(t, s)
	})
}
