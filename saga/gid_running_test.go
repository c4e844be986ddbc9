package saga_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestSubmitOfAGIDStillRunningNeverStarts: like TestSubmitOfAReusedGIDNeverStarts, but the saga holding
// the gid is still running (its second action answers 425 while a redelivery holds its lock). DTM
// accepts a submit for a gid it holds as submitted: the second call must not follow the first saga
// and take its success for its own (commit hook run, record SUCCEEDED, none of its steps run).
func TestSubmitOfAGIDStillRunningNeverStarts(t *testing.T) {
	k := newBank(t, nil)
	gid := txstatus.NewGID()
	release := k.holdLock(t, gid, "02", "action") // the first saga stays submitted
	first := *k.init
	first.Wait = 500 * time.Millisecond
	out, err := first.Submit(ctxb, saga.SubmitParams{Call: newCall(), GID: gid, Steps: k.addSteps, Result: []byte("one")})
	if err != nil || out.Status != txstatus.Submitted {
		t.Fatalf("first = %+v, %v", out, err)
	}
	waitFor(t, "the second action to be answered 425", func() bool { return k.count(gid, "02 action:425:-") >= 1 })

	second, committed := k.committingInitiator()
	second.Wait = 3 * time.Second
	c := newCall()
	done := make(chan struct{})
	go func() { // let the first saga go on once the second submit is in
		defer close(done)
		time.Sleep(time.Second)
		release()
		_ = k.srv.ResetNextCronTime(ctxb, gid)
	}()
	out, err = second.Submit(ctxb, saga.SubmitParams{Call: c, GID: gid, Steps: k.addSteps, Result: []byte("two")})
	<-done
	rec := k.record(t, c)
	if out.Status != txstatus.Failed || rec.Status == idemkit.StatusSucceeded || len(*committed) != 0 {
		t.Fatalf("a submit of a gid held by a running saga was taken for this call's saga: %+v, %v; record %s, commit hook ran for %q",
			out, err, rec.Status, *committed)
	}
	if !errors.Is(out.Reason, hooks.ErrRolledBack) {
		t.Fatalf("reason = %v, want hooks.ErrRolledBack", out.Reason)
	}
	// The first saga goes on to its end, its steps run once.
	waitFor(t, "the first saga to succeed", func() bool {
		st, _ := k.init.Status.Status(ctxb, gid)
		return st == txstatus.Succeed
	})
	if n := k.runsOf("/TransIn"); n != 1 {
		t.Fatalf("TransIn ran %d times, want 1 (the first saga's)", n)
	}
}
