package main

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/sweep"
)

// TestSweptClaimsLockIsReleased: an order request whose holder died holds its Redis lock past its
// lease (a Guard of another instance whose clock runs behind). The example's sweeper recovered the
// record lock-blind (sweep.RecordTasks), and every retry of the key answered 409 in flight until the
// lock expired. It recovers through sweep.RecordTasksWithLocker now: the dead holder's lock goes with
// its claim, and the retry places the order.
func TestSweptClaimsLockIsReleased(t *testing.T) {
	t.Parallel()
	cfg := mariaDBConfig(t)
	cfg.SweepInterval = time.Hour // the test runs the sweeper pass itself
	svc := startServices(t, cfg)
	ctx := context.Background()
	c := newClient(svc.URL)
	if err := c.put(ctx, "/api/accounts/alice", map[string]int64{"balance": 1_000}); err != nil {
		t.Fatal(err)
	}
	if err := c.put(ctx, "/api/inventory/apple", map[string]int64{"stock": 10}); err != nil {
		t.Fatal(err)
	}

	const scope = "POST /api/orders"
	key := testsvc.Name("swept")
	now := time.Now()
	stuck := &idemkit.Record{Scope: scope, Key: key, Status: idemkit.StatusProcessing, Fence: 1, Owner: "dead holder",
		LeaseUntil: now.Add(-time.Minute), ExpiresAt: now.Add(24 * time.Hour), CreatedAt: now.Add(-2 * time.Minute), UpdatedAt: now.Add(-2 * time.Minute)}
	// The lock first: a sweeper pass (the one Start runs) may recover the claim as soon as it is in.
	lk := lock.New(svc.rdb, &lock.Options{Prefix: cfg.RedisPrefix})
	if _, err := lk.Acquire(ctx, idemkit.LockKey(scope, key), stuck.Owner, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := svc.store.Insert(ctx, stuck); err != nil {
		t.Fatal(err)
	}

	for {
		_, err := svc.sweeper.RunOnce(ctx)
		if errors.Is(err, sweep.ErrSkipped) { // the pass Start runs holds the sweeper lock
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	// Recovered by that pass, or by the one Start ran if it came after the insert.
	if rec, err := svc.store.Get(ctx, scope, key); err != nil || rec.Status != idemkit.StatusFailed {
		t.Fatalf("the stale claim after a sweeper pass: %+v %v, want it recovered (FAILED)", rec, err)
	}
	r, err := c.do(ctx, http.MethodPost, "/api/orders", key, orderRequest{UserID: "alice", SKU: "apple", Qty: 1, Amount: 100})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusCreated {
		t.Fatalf("retry of the swept order: %s, want 201 (the dead holder's lock released with its claim)", r)
	}
}
