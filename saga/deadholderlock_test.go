package saga_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestReconciledKeyOfADeadInitiatorAnswersAtOnce: an initiator dies after its submit, holding its claim's
// Redis lock, on a Guard whose LockTTL is longer than its Lease. The Reconciler settles the record once
// the lease ran out (SUCCEEDED, or FAILED when the saga rolled back), but the dead initiator's lock
// stayed: every duplicate of the settled key was answered in flight until LockTTL ran out — the success
// not replayed, the rolled-back key not retried — although the record, which still names the dead
// holder, said what to answer. Settling the record releases the lock its holder still holds.
func TestReconciledKeyOfADeadInitiatorAnswersAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		frozen bool
		status idemkit.Status
	}{
		{"Succeeded", false, idemkit.StatusSucceeded},
		{"RolledBack", true, idemkit.StatusFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := newBank(t, nil)
			k.setFrozen(t, transIn, tc.frozen)
			// A lease shorter than the lock's time to live: the record is pending before the lock ends.
			g, err := idemkit.New(k.store, &idemkit.Options{Locker: k.locker, Lease: time.Second, LockTTL: 10 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			lc := *k.lc
			lc.Guard = g
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
			rc := &hooks.Reconciler{Lifecycle: &lc, Scopes: []string{c.Scope}, Manager: &txstatus.Client{Server: k.srv.URL()}, TransType: "saga"}
			// The reconciler's clock runs past the claim's lease (not past the lock's time to live).
			if n, err := rc.RunOnce(ctxb, time.Now().Add(2*time.Second), 10); n != 1 || err != nil {
				t.Fatalf("reconcile = %d, %v", n, err)
			}
			if rec, err := g.Get(ctxb, c.Scope, c.Key); err != nil || rec.Status != tc.status {
				t.Fatalf("record %+v, %v; want %s", rec, err, tc.status)
			}
			k.setFrozen(t, transIn, false) // the retry's saga can succeed
			init := *k.init
			init.Lifecycle = &lc
			out, err := init.Submit(ctxb, saga.SubmitParams{Call: c, Steps: k.addSteps, Result: []byte("again")})
			if errors.Is(err, idemkit.ErrInFlight) {
				t.Fatalf("the key the Reconciler settled %s is answered in flight (the dead initiator's lock): %v", tc.status, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			switch tc.status {
			case idemkit.StatusSucceeded:
				if !out.Replayed {
					t.Fatalf("duplicate of a succeeded key = %+v, want a replay", out)
				}
			default:
				if out.Replayed || out.Status != txstatus.Succeed || out.GID == gid {
					t.Fatalf("retry of a rolled-back key = %+v, want a new saga that succeeds", out)
				}
			}
		})
	}
}
