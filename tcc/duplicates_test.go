package tcc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/txstatus"
)

// TestDuplicatesBesideAnEagerReconciler: 8 keys, each run 3 times at once in 3 rounds, through a
// gateway that delays every call to DTM by up to 80 ms, while a reconciler runs every 30 ms with a clock
// an hour ahead — every claim's lease lapsed to it, so it fences and settles the gids of live
// initiators whose prepare is still on its way (their TCC then joins the fence's, or is refused). Once
// everything settled: the Commit hook ran for a gid exactly when DTM confirmed its branches, and never
// beside the Rollback hook; no key succeeded twice; a key's record is SUCCEEDED exactly when one of its
// TCCs did, naming that gid; and the money moved once per succeeded key, nothing left reserved. On
// DTM's boltdb store and on its MySQL store.
func TestDuplicatesBesideAnEagerReconciler(t *testing.T) {
	for _, store := range []string{"boltdb", "mysql"} {
		t.Run(store, func(t *testing.T) {
			k := newBank(t)
			if store == "mysql" {
				k.srv = testsvc.DTMOnMySQL(t)
			}
			duplicatesBesideAnEagerReconciler(t, k)
		})
	}
}

func duplicatesBesideAnEagerReconciler(t *testing.T, k *bank) {
	p := testsvc.SlowGateway(t, k.srv, 80*time.Millisecond)
	var mu sync.Mutex
	gids := map[string]string{}   // gid → the key its Before hook ran for
	hookOf := map[string]string{} // gid → "commit" or "rollback", the last hook run
	lc := &hooks.Lifecycle{
		Guard: k.guard,
		Before: hooks.BeforeTransactionFunc(func(_ context.Context, tx *hooks.Txn) error {
			mu.Lock()
			defer mu.Unlock()
			gids[tx.GID] = tx.Record.Key
			return nil
		}),
		OnCommit: hooks.CommitFunc(func(_ context.Context, tx *hooks.Txn, _ []byte) error {
			mu.Lock()
			defer mu.Unlock()
			if hookOf[tx.GID] == "rollback" {
				t.Errorf("commit after rollback for %s", tx.GID)
			}
			hookOf[tx.GID] = "commit"
			return nil
		}),
		OnRollback: hooks.RollbackFunc(func(_ context.Context, tx *hooks.Txn, _ error) error {
			mu.Lock()
			defer mu.Unlock()
			if hookOf[tx.GID] == "commit" {
				t.Errorf("rollback after commit for %s", tx.GID)
			}
			hookOf[tx.GID] = "rollback"
			return nil
		}),
	}
	g := *k.global
	g.Server = p.URL()
	g.Status = &txstatus.Client{Server: p.URL(), PollInterval: 50 * time.Millisecond}
	g.Lifecycle = lc
	g.Wait = 2 * time.Second
	rc := func() *hooks.Reconciler {
		return &hooks.Reconciler{Lifecycle: lc, Scopes: []string{"POST /transfers"}, Manager: &txstatus.Client{Server: k.srv.URL()}, TransType: "tcc"}
	}
	calls := make([]idemkit.Call, 8)
	for i := range calls {
		calls[i] = newCall()
	}
	testsvc.DuplicateStorm(t, len(calls), func(i int) {
		c := calls[i]
		out, err := g.Run(ctxb, k.runParams(c))
		if (out.Replayed || out.Status == txstatus.Succeed) && string(out.Result) != `{"transfer":"done"}` {
			t.Errorf("key %s: %+v, %v", c.Key, out, err)
		}
	}, func() { _, _ = rc().RunOnce(ctxb, time.Now().Add(time.Hour), 100) },
		func(i int) bool { return k.record(t, calls[i]).Status == idemkit.StatusProcessing }, 2*settleTimeout)
	moved := 0
	mu.Lock()
	defer mu.Unlock()
	for _, c := range calls {
		rec := k.record(t, c)
		succeeded := 0
		for gid, key := range gids {
			if key != rec.Key {
				continue
			}
			tr := waitTrans(t, k.srv, gid)
			ok := tr.Status == "succeed" && len(tr.Branches) > 0
			if ok {
				succeeded++
			}
			if ok != (hookOf[gid] == "commit") {
				t.Errorf("key %s gid %s: DTM %s (%d branches), hook %q", c.Key, gid, tr.Status, len(tr.Branches), hookOf[gid])
			}
			if ok && rec.GID != gid {
				t.Errorf("key %s: gid %s succeeded, record %s names %s", c.Key, gid, rec.Status, rec.GID)
			}
		}
		moved += succeeded * amount
		if succeeded > 1 || (rec.Status == idemkit.StatusSucceeded) != (succeeded == 1) {
			t.Errorf("key %s: record %s gid %s, %d succeeded", c.Key, rec.Status, rec.GID, succeeded)
		}
	}
	k.checkBalances(t, moved)
}
