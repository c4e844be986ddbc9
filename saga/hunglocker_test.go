package saga_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/txstatus"
)

// releaseCounter counts the Releases its Locker answered (failed ones included).
type releaseCounter struct {
	idemkit.Locker
	answered atomic.Int32
}

func (l *releaseCounter) Release(ctx context.Context, key, token string, result []byte, cacheTTL time.Duration) error {
	defer l.answered.Add(1)
	return l.Locker.Release(ctx, key, token, result, cacheTTL)
}

// TestReconcilerIsNotHeldUpByAHungLocker: initiators died after their submit, each holding its claim's
// Redis lock, and then Redis stopped answering (a frozen server, a network dropping packets). The
// Reconciler settled every record, but each settlement (Guard.Settle) waited for the release of the
// dead holder's lock until FinishTimeout: a pass over a backlog of 500 such records took 500 times
// FinishTimeout (42 minutes with the default 5 s), holding the sweeper's pass — the failure
// recover_stale's lock releases had (sweep.TestRecoveryIsNotHeldUpByAHungLocker). Once 3 holder
// releases in a row failed, Settle no longer waits for them: it releases in the background (bounded
// by FinishTimeout, at most 64 at once; the rest expire by themselves), and waits again once one
// succeeds.
func TestReconcilerIsNotHeldUpByAHungLocker(t *testing.T) {
	k := newBank(t, nil)
	rs := testsvc.StartRedis(t) // private: stalling the shared one would stall every other test
	px := testsvc.StartProxy(t, rs.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	lk := &releaseCounter{Locker: lock.New(rdb, &lock.Options{Prefix: testsvc.Name("idemkit-test-") + ":"})}
	const finish = 2 * time.Second
	g, err := idemkit.New(k.store, &idemkit.Options{Locker: lk, Lease: time.Second, LockTTL: 10 * time.Minute, FinishTimeout: finish})
	if err != nil {
		t.Fatal(err)
	}
	lc := *k.lc
	lc.Guard = g
	const records = 6
	var calls []idemkit.Call
	for range records {
		c := newCall()
		gid := txstatus.NewGID()
		if _, _, err := lc.Begin(ctxb, "saga", gid, c); err != nil {
			t.Fatal(err)
		}
		s := dtmcli.NewSaga(k.srv.URL(), gid)
		k.addSteps(s)
		if err := s.Submit(); err != nil {
			t.Fatal(err)
		}
		// The initiator dies here: no Detach, its lock stays until LockTTL.
		waitTrans(t, k.srv, gid)
		calls = append(calls, c)
	}
	px.Stall()
	t.Cleanup(func() {
		// Let the releases left in the background end (their deadline) before the next test.
		wctx, cancel := context.WithTimeout(ctxb, 3*finish)
		defer cancel()
		_ = g.Wait(wctx)
	})

	rc := &hooks.Reconciler{Lifecycle: &lc, Scopes: []string{calls[0].Scope}, Manager: &txstatus.Client{Server: k.srv.URL()}, TransType: "saga"}
	n, err := rc.RunOnce(ctxb, time.Now().Add(2*time.Second), records) // past the leases, not the locks
	answered := lk.answered.Load()
	if n != records || err != nil {
		t.Fatalf("reconcile = %d, %v; want %d settled", n, err, records)
	}
	for _, c := range calls {
		if rec, err := g.Get(ctxb, c.Scope, c.Key); err != nil || rec.Status != idemkit.StatusSucceeded {
			t.Fatalf("record of %s: %+v, %v; want SUCCEEDED", c.Key, rec, err)
		}
	}
	// Every release waits for its deadline on the stalled Redis: those the pass waited for had
	// answered by the time it returned.
	if answered > 3 {
		t.Fatalf("the reconciler's pass waited for %d lock releases on a Redis that does not answer, want at most 3", answered)
	}
}
