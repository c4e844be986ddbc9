package saga_test

import (
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestDuplicatesBesideAnEagerReconciler: 8 keys, each submitted 3 times at once in 3 rounds, through a
// gateway that delays every call to DTM by up to 80 ms, while a reconciler runs every 30 ms with a clock
// an hour ahead — every claim's lease lapsed to it, so it fences and settles the gids of live
// initiators whose submit is still on its way. Once everything settled: every order row (one per gid
// a Before hook ran for) is PAID exactly when DTM ran that saga's steps to success, none is left
// PENDING, no key paid twice, a key's record is SUCCEEDED exactly when one of its sagas paid, and the
// money moved once per paid key. On DTM's boltdb store and on its MySQL store.
func TestDuplicatesBesideAnEagerReconciler(t *testing.T) {
	for _, store := range []string{"boltdb", "mysql"} {
		t.Run(store, func(t *testing.T) {
			k := newBank(t, nil)
			if store == "mysql" {
				k.srv = testsvc.DTMOnMySQL(t)
			}
			duplicatesBesideAnEagerReconciler(t, k)
		})
	}
}

func duplicatesBesideAnEagerReconciler(t *testing.T, k *bank) {
	p := testsvc.SlowGateway(t, k.srv, 80*time.Millisecond)
	init := *k.via(p.URL())
	init.Wait = 2 * time.Second
	calls := make([]idemkit.Call, 8)
	for i := range calls {
		calls[i] = newCall()
	}
	reconcile := func() { _, _ = k.reconciler().RunOnce(ctxb, time.Now().Add(time.Hour), 100) }
	testsvc.DuplicateStorm(t, len(calls), func(i int) {
		c := calls[i]
		out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte("R")})
		if out.Replayed && string(out.Result) != "R" {
			t.Errorf("key %s replayed %q", c.Key, out.Result)
		}
		if out.Status == txstatus.Succeed && (err != nil || string(out.Result) != "R") {
			t.Errorf("key %s succeeded with %q, %v", c.Key, out.Result, err)
		}
	}, reconcile, func(i int) bool { return k.record(t, calls[i]).Status == idemkit.StatusProcessing }, settleTimeout)
	totalPaid := 0
	for _, c := range calls {
		rec := k.record(t, c)
		var rows []struct{ Gid, Status string }
		if err := k.db.Raw("SELECT gid, status FROM "+k.orders+" WHERE idem_key = ?", rec.Key).Scan(&rows).Error; err != nil {
			t.Fatal(err)
		}
		paid := 0
		for _, r := range rows {
			st := txstatus.Unknown
			if tr, err := k.srv.Query(ctxb, r.Gid); err == nil && tr != nil {
				st = txstatus.Status(tr.Status)
				if st == txstatus.Succeed && len(tr.Branches) == 0 {
					st = "ran nothing" // a late submit on a fence (see txstatus.Info.RanNothingFor)
				}
			}
			if r.Status == "PAID" {
				paid++
			}
			if (r.Status == "PAID") != (st == txstatus.Succeed) {
				t.Errorf("key %s gid %s order %s DTM %s", c.Key, r.Gid, r.Status, st)
			}
			if r.Status == "PENDING" {
				t.Errorf("key %s gid %s order PENDING DTM %s", c.Key, r.Gid, st)
			}
		}
		totalPaid += paid
		if paid > 1 {
			t.Errorf("key %s paid %d times: %+v", c.Key, paid, rows)
		}
		if (rec.Status == idemkit.StatusSucceeded) != (paid == 1) {
			t.Errorf("key %s record %s gid %s, orders %+v", c.Key, rec.Status, rec.GID, rows)
		}
	}
	k.checkBalances(t, totalPaid*amount)
}
