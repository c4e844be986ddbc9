package dtmmsg_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestFailedAfterTheLocalCommitKeepsTheKey: a message whose local transaction committed, which DTM
// reports failed all the same (its back-check answered FAILURE: here one reading another barrier table,
// a QueryPrepared URL of the wrong service), will not be delivered. The publisher rolled its record
// back (FAILED), freeing the key: a retry ran Local again and committed the key's local transaction a
// second time. The record is now left PROCESSING for an operator, as the Reconciler leaves it, and
// Publish says why.
func TestFailedAfterTheLocalCommitKeepsTheKey(t *testing.T) {
	e := setup(t)
	wrong, err := barrier.NewGorm(e.w.DB, &barrier.GormOptions{Table: testsvc.Name("msg_wrong_barrier")})
	if err != nil {
		t.Fatal(err)
	}
	if err := wrong.CreateTable(ctxb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.w.DB.Exec("DROP TABLE IF EXISTS " + wrong.Table()).Error })
	srv := httptest.NewServer(dtmmsg.BackCheck(wrong))
	t.Cleanup(srv.Close)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 10*time.Second)
	pub.QueryPrepared = srv.URL

	const key = "fc1"
	publish := func() (int, error) {
		runs := 0
		_, err := pub.Publish(ctxb, dtmmsg.PublishParams{
			Call: idemkit.Call{Scope: chaosdtmmsg.Scope, Key: key},
			Steps: func(m *dtmcli.Msg) {
				m.Add(e.svc+"/inbox", chaosdtmmsg.Order{Key: key, Amount: 7})
				m.RetryInterval, m.TimeoutToFail = 1, 1 // back-checked after about a second
			},
			Local: func(ctx context.Context, tx *gorm.DB, gid string) error {
				runs++
				if err := tx.Exec("INSERT INTO "+e.w.Tables.Orders+" (gid, idem_key, amount) VALUES (?, ?, 7)", gid, key).Error; err != nil {
					return err
				}
				time.Sleep(2500 * time.Millisecond) // DTM back-checks meanwhile
				return nil
			},
			Result: []byte(`{"order":"fc1"}`),
		})
		return runs, err
	}
	runs, err := publish()
	t.Logf("Publish: %v", err)
	if runs != 1 || e.count(t, e.w.Tables.Orders, "idem_key = ?", key) != 1 {
		t.Fatalf("the local transaction ran %d times", runs)
	}
	if err == nil {
		t.Error("Publish returned no error for a committed local transaction whose message DTM failed")
	}
	rec, rerr := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, key)
	if rerr != nil || rec.Status != idemkit.StatusProcessing {
		t.Errorf("record %+v, %v: want PROCESSING, for an operator", rec, rerr)
	}
	runs, err = publish()
	if orders := e.count(t, e.w.Tables.Orders, "idem_key = ?", key); runs != 0 || orders != 1 {
		t.Fatalf("a retry with the key: Local ran %d times, %d orders committed for the key, %v; want none run, one order", runs, orders, err)
	}
	if !errors.Is(err, idemkit.ErrInFlight) {
		t.Fatalf("a retry with the key: %v, want ErrInFlight", err)
	}
}
