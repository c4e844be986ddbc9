package saga_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/saga"
	"github.com/idemkit/idemkit/txstatus"
)

// TestSubmitRefusesGIDThatDTMRewrites: DTM's HTTP API removes ';', CR and LF from the gids it is
// given, so a saga submitted under such a gid would run under another one than its record's, which no
// query or fence of the record's gid finds: the record would stay PROCESSING forever. Submit refuses
// it before anything starts.
func TestSubmitRefusesGIDThatDTMRewrites(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	for _, bad := range []string{";x", "\nx", "\rx"} {
		c := newCall()
		gid := txstatus.NewGID() + bad
		out, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, GID: gid, Steps: k.addSteps, Result: []byte("ok")})
		if err == nil || out.Status != "" {
			t.Fatalf("Submit(GID %q) = %+v, %v; want an error and nothing started", gid, out, err)
		}
		if _, gerr := k.guard.Get(ctxb, c.Scope, c.Key); !errors.Is(gerr, idemkit.ErrNotFound) {
			t.Fatalf("Submit(GID %q) left a record: %v", gid, gerr)
		}
	}
	if m := k.moved(t); m != 0 {
		t.Fatalf("balances moved by %d", m)
	}
}

// TestCancelledCallerStillSettles: the wait for the outcome survives the caller's cancellation (a
// client that disconnects from the handler), and so must what follows it: the Commit hook and the
// record. Submit returns the success, the record is SUCCEEDED and the order PAID, with no error.
func TestCancelledCallerStillSettles(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	c := newCall()
	ctx, cancel := context.WithCancel(ctxb)
	defer cancel()
	// The client goes away while Submit waits for the saga's outcome: at its first status query,
	// once DTM has the saga (a timer could fire before the submit itself, on a loaded machine).
	var once sync.Once
	k.init.Status = &txstatus.Client{Server: k.srv.URL(), PollInterval: 50 * time.Millisecond,
		HTTP: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.HasSuffix(r.URL.Path, "/query") {
				once.Do(cancel)
			}
			return http.DefaultTransport.RoundTrip(r)
		})}}
	out, err := k.init.Submit(ctx, saga.SubmitParams{Call: c, Result: []byte("ok"), Steps: k.addSteps})
	if ctx.Err() == nil {
		t.Fatal("Submit asked DTM nothing while it waited: the caller never went away")
	}
	if out.Status != txstatus.Succeed || err != nil {
		t.Fatalf("Submit = %+v, %v", out, err)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusSucceeded || k.orderStatus(t, out.GID) != "PAID" {
		t.Fatalf("the saga succeeded and Submit saw it, but the record is %s and the order %s", rec.Status, k.orderStatus(t, out.GID))
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (k *bank) moved(t *testing.T) int {
	var b int
	if err := k.db.Raw("SELECT balance FROM "+k.accts+" WHERE id = ?", transIn).Scan(&b).Error; err != nil {
		t.Fatal(err)
	}
	return b - initBalance
}

// TestCallerGoneDuringSubmitStillSettles: the caller goes away while the submit is on its way (a
// client that disconnects, a deadline shorter than DTM's answer): DTM has the saga, the answer is lost.
// Submit asked DTM whether the start arrived with the caller's ended context, which could not ask, and
// left the record PROCESSING for the Reconciler with an error, although the wait that follows a start
// outlives the caller: every retry of the key was in flight until the lease ran out and a Reconciler
// came by. It asks whatever became of the caller, and follows the saga to its outcome.
func TestCallerGoneDuringSubmitStillSettles(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	c := newCall()
	ctx, cancel := context.WithCancel(ctxb)
	defer cancel()
	k.init.Status = &txstatus.Client{Server: k.srv.URL(), PollInterval: 50 * time.Millisecond,
		HTTP: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := http.DefaultTransport.RoundTrip(r)
			if err == nil && strings.HasSuffix(r.URL.Path, "/submit") {
				// DTM took the submit; the caller leaves before its answer is read.
				resp.Body.Close()
				cancel()
				return nil, context.Canceled
			}
			return resp, err
		})}}
	out, err := k.init.Submit(ctx, saga.SubmitParams{Call: c, Result: []byte("ok"), Steps: k.addSteps})
	if ctx.Err() == nil {
		t.Fatal("the submit was never posted: the caller never went away")
	}
	if out.Status != txstatus.Succeed || err != nil || string(out.Result) != "ok" {
		t.Fatalf("Submit = %+v, %v; want the submitted saga followed to succeed", out, err)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusSucceeded || k.orderStatus(t, out.GID) != "PAID" {
		t.Fatalf("the saga succeeded, but the record is %s and the order %s", rec.Status, k.orderStatus(t, out.GID))
	}
}

// TestCallerGoneBeforeSubmitFreesTheKey: the caller goes away once the Before hook wrote the order,
// before the saga is submitted. Submit renewed the claim with the caller's ended context, which failed,
// and took that for a Store that cannot answer: the record was left PROCESSING "for the reconciler",
// every retry of the key in flight until the lease ran out, and the Reconciler then had to fence a gid
// DTM never heard of, logging at error level what the README says to alert on. Nothing was or will
// be submitted: the record is rolled back at once (the Rollback hook cancels the order) and a retry
// runs a new saga.
func TestCallerGoneBeforeSubmitFreesTheKey(t *testing.T) {
	t.Parallel()
	k := newBank(t, nil)
	c := newCall()
	ctx, cancel := context.WithCancel(ctxb)
	defer cancel()
	lc := *k.lc
	before := lc.Before
	lc.Before = hooks.BeforeTransactionFunc(func(ctx context.Context, tx *hooks.Txn) error {
		err := before.BeforeTransaction(ctx, tx)
		cancel() // the client disconnects once the order row is written
		return err
	})
	init := *k.init
	init.Lifecycle = &lc
	out, err := init.Submit(ctx, saga.SubmitParams{Call: c, Result: []byte("ok"), Steps: k.addSteps})
	if err == nil || out.Status != txstatus.Failed {
		t.Fatalf("Submit = %+v, %v; want an error and nothing started", out, err)
	}
	if tr, qerr := k.srv.Query(ctxb, out.GID); qerr != nil || tr.Status != "" {
		t.Fatalf("DTM holds %s: %+v, %v", out.GID, tr, qerr)
	}
	if rec := k.record(t, c); rec.Status != idemkit.StatusFailed || k.orderStatus(t, out.GID) != "CANCELLED" {
		t.Fatalf("nothing started, but the record is %s and the order %s", rec.Status, k.orderStatus(t, out.GID))
	}
	again, err := k.init.Submit(ctxb, saga.SubmitParams{Call: c, Result: []byte("ok"), Steps: k.addSteps})
	if err != nil || again.Status != txstatus.Succeed {
		t.Fatalf("retry = %+v, %v; want a new saga", again, err)
	}
}
