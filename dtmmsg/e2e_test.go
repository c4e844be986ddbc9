package dtmmsg_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// TestPublishOnce: the local transaction commits and the message's branch runs once; duplicates of
// the key, sequential or concurrent, publish nothing more.
func TestPublishOnce(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 20*time.Second)
	out, err := e.w.PublishOrder(ctxb, pub, e.svc, "k1", 10, nil)
	if err != nil || out.Status != txstatus.Succeed || out.Replayed {
		t.Fatalf("publish: %+v %v", out, err)
	}
	if n := e.count(t, e.w.Tables.Inbox, "gid = ?", out.GID); n != 1 {
		t.Fatalf("branch took effect %d times", n)
	}
	rec, err := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "k1")
	if err != nil || rec.Status != idemkit.StatusSucceeded || rec.GID != out.GID {
		t.Fatalf("record %+v %v", rec, err)
	}
	dup, err := e.w.PublishOrder(ctxb, pub, e.svc, "k1", 10, nil)
	if err != nil || !dup.Replayed || string(dup.Result) != `{"order":"k1"}` {
		t.Fatalf("duplicate: %+v %v", dup, err)
	}

	// Concurrent duplicates of a new key: one publication.
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := e.w.PublishOrder(ctxb, pub, e.svc, "k2", 5, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, idemkit.ErrInFlight):
				outcomes["in flight"]++
			case err != nil:
				t.Errorf("concurrent publish: %v", err)
			case out.Replayed:
				outcomes["replayed"]++
			default:
				outcomes["published"]++
			}
		}()
	}
	wg.Wait()
	if outcomes["published"] != 1 {
		t.Fatalf("outcomes %v", outcomes)
	}
	if n := e.count(t, e.w.Tables.Inbox, "idem_key = ?", "k2"); n != 1 {
		t.Fatalf("key published %d times", n)
	}
	if n := e.count(t, e.w.Tables.Orders, "idem_key = ?", "k2"); n != 1 {
		t.Fatalf("key committed %d times", n)
	}
}

// TestLocalRollbackPublishesNothing: a failing local transaction commits nothing and publishes
// nothing; a retryable failure frees the key, a permanent one is replayed.
func TestLocalRollbackPublishesNothing(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 20*time.Second)
	boom := errors.New("disk full")
	out, err := pub.Publish(ctxb, dtmmsg.PublishParams{
		Call:  idemkit.Call{Scope: chaosdtmmsg.Scope, Key: "r1", Fingerprint: "7"},
		Steps: steps(e, "r1"),
		Local: func(ctx context.Context, tx *gorm.DB, gid string) error {
			if err := tx.Exec("INSERT INTO "+e.w.Tables.Orders+" (gid, idem_key, amount) VALUES (?, 'r1', 7)", gid).Error; err != nil {
				return err
			}
			return boom
		},
	})
	if !errors.Is(err, dtmmsg.ErrLocalFailed) || !errors.Is(err, boom) || out.Status != txstatus.Failed {
		t.Fatalf("got %+v %v", out, err)
	}
	st, serr := (&txstatus.Client{Server: e.dtm.URL()}).Status(ctxb, out.GID)
	if serr != nil || st != txstatus.Failed {
		t.Fatalf("DTM says %s %v, want failed (aborted)", st, serr)
	}
	rec, err := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, "r1")
	if err != nil || rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %+v %v", rec, err)
	}
	// The key is free again: a retry publishes, once.
	out2, err := e.w.PublishOrder(ctxb, pub, e.svc, "r1", 7, nil)
	if err != nil || out2.Status != txstatus.Succeed || out2.GID == out.GID {
		t.Fatalf("retry: %+v %v", out2, err)
	}
	if a, b := e.count(t, e.w.Tables.Orders, "idem_key = 'r1'"), e.count(t, e.w.Tables.Inbox, "idem_key = 'r1'"); a != 1 || b != 1 {
		t.Fatalf("orders %d inbox %d, want 1 and 1", a, b)
	}

	// A permanent failure is stored and replayed.
	_, err = e.w.PublishOrder(ctxb, pub, e.svc, "r2", -1, nil)
	if !errors.Is(err, chaosdtmmsg.ErrOutOfStock) {
		t.Fatalf("permanent failure: %v", err)
	}
	dup, err := e.w.PublishOrder(ctxb, pub, e.svc, "r2", -1, nil)
	if !dup.Replayed || !errors.Is(err, idemkit.ErrRejected) {
		t.Fatalf("replay of the permanent failure: %+v %v", dup, err)
	}
	if n := e.count(t, e.w.Tables.Inbox, "idem_key = 'r2'"); n != 0 {
		t.Fatalf("published %d times", n)
	}
}

// TestBackCheck: DTM's back-check answers FAILURE for a message whose local transaction did not
// commit, and from then on that transaction can never commit; SUCCESS for one that committed.
func TestBackCheck(t *testing.T) {
	e := setup(t)
	get := func(gid string) (int, string) {
		resp, err := http.Get(e.svc + "/query-prepared?trans_type=msg&branch_id=00&op=msg&gid=" + gid)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("never-committed"); code != http.StatusConflict || !strings.Contains(body, `"dtm_result":"FAILURE"`) {
		t.Fatalf("uncommitted: %d %s", code, body)
	}
	err := e.w.DB.Transaction(func(tx *gorm.DB) error {
		b, _ := barrier.MsgBranch("never-committed")
		_, err := e.w.Barrier.Enter(ctxb, tx, b)
		return err
	})
	if !errors.Is(err, barrier.ErrDuplicate) {
		t.Fatalf("a local transaction after the back-check: %v, want barrier.ErrDuplicate", err)
	}
	if err := e.w.DB.Transaction(func(tx *gorm.DB) error {
		b, _ := barrier.MsgBranch("committed")
		_, err := e.w.Barrier.Enter(ctxb, tx, b)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if code, body := get("committed"); code != http.StatusOK || !strings.Contains(body, `"dtm_result":"SUCCESS"`) {
		t.Fatalf("committed: %d %s", code, body)
	}
	if code, _ := get(""); code != http.StatusBadRequest {
		t.Fatalf("no gid: %d", code)
	}
	// ';', CR and LF are removed from the gid, as dtmcli's back-check (and dtmhttp) removes them.
	if code, body := get("commit%3Bt%0D%0Aed"); code != http.StatusOK || !strings.Contains(body, `"dtm_result":"SUCCESS"`) {
		t.Fatalf("committed, with ';', CR and LF in the gid: %d %s", code, body)
	}
}

// TestReconcilerCommitsWithTheStoredResult: a publication whose initiator stopped waiting is settled by
// the Reconciler, whose Commit hook gets the result the publisher stored with the claim, as
// hooks.Reconciler passes it.
func TestReconcilerCommitsWithTheStoredResult(t *testing.T) {
	e := setup(t)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 0)
	status := e.delivered(t, pub, "r1", 3)
	var got []string
	lc := &hooks.Lifecycle{Guard: e.w.Guard, OnCommit: hooks.CommitFunc(func(_ context.Context, _ *hooks.Txn, result []byte) error {
		got = append(got, string(result))
		return nil
	})}
	r := &dtmmsg.Reconciler{Lifecycle: lc, Barrier: e.w.Barrier, Status: status.Status,
		Pending: func(ctx context.Context, now time.Time, limit int) ([]*idemkit.Record, error) {
			return e.w.Guard.Pending(ctx, now.Add(time.Hour), limit, chaosdtmmsg.Scope)
		}}
	if n, err := r.RunOnce(ctxb, time.Now(), 10); n != 1 || err != nil {
		t.Fatalf("RunOnce = %d, %v", n, err)
	}
	if len(got) != 1 || got[0] != `{"order":"r1"}` {
		t.Fatalf("Commit hook got %q; want the stored result", got)
	}
}

// steps adds the world's inbox branch for key, with a back-check after about a second.
func steps(e *env, key string) func(m *dtmcli.Msg) {
	return func(m *dtmcli.Msg) {
		m.Add(e.svc+"/inbox", chaosdtmmsg.Order{Key: key, Amount: 7})
		m.RetryInterval, m.TimeoutToFail = 1, 1
	}
}
