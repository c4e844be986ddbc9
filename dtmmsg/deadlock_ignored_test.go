package dtmmsg_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/txstatus"
)

// TestLocalIgnoringADeadlockPublishesNothing: on MySQL/MariaDB a deadlock rolls the victim's whole
// transaction back — the message's barrier row and Local's writes before it — and leaves its
// connection outside any transaction, so a Local that ignored the deadlock's error had its later
// statements commit one by one and the publication went on: the message was published (and its
// back-check, had the publisher died, would have answered FAILURE) although its local transaction
// was rolled back. Local's session now refuses every statement after the deadlock, as PostgreSQL does
// in an aborted transaction, and the local transaction fails: nothing published, the key free again.
func TestLocalIgnoringADeadlockPublishesNothing(t *testing.T) {
	e := setup(t)
	rows := testsvc.RowsTable(t, e.w.DB)
	pub := e.w.Publisher(e.dtm.URL(), e.svc, 20*time.Second)
	const key = "dl1"
	var deadlocked error
	out, err := pub.Publish(ctxb, dtmmsg.PublishParams{
		Call: idemkit.Call{Scope: chaosdtmmsg.Scope, Key: key},
		Steps: func(m *dtmcli.Msg) {
			m.Add(e.svc+"/inbox", chaosdtmmsg.Order{Key: key, Amount: 7})
		},
		Local: func(ctx context.Context, tx *gorm.DB, gid string) error {
			if err := tx.Exec("INSERT INTO "+e.w.Tables.Orders+" (gid, idem_key, amount) VALUES (?, ?, 7)", gid, key).Error; err != nil {
				return err
			}
			if err := tx.Exec("UPDATE " + rows + " SET v = v + 1 WHERE id = 1").Error; err != nil {
				return err
			}
			sqlDB, err := e.w.DB.DB()
			if err != nil {
				return err
			}
			if deadlocked, err = testsvc.Deadlock(ctx, sqlDB, tx, rows, func(ctx context.Context, other *sql.Tx) error {
				for i := range 20 {
					if _, err := other.ExecContext(ctx, "INSERT INTO "+e.w.Tables.Orders+" (gid, idem_key, amount) VALUES (?, 'other', ?)", txstatus.NewGID(), i); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return err
			}
			// deadlocked ignored: the business's bug. This would commit on its own.
			_ = tx.Exec("INSERT INTO "+e.w.Tables.Orders+" (gid, idem_key, amount) VALUES (?, ?, 8)", gid+"-late", key).Error
			return nil
		},
		Result: []byte(`{"order":"dl1"}`),
	})
	t.Logf("deadlock: %v; Publish = %+v, %v", deadlocked, out, err)
	if deadlocked == nil {
		t.Fatal("no deadlock: the local transaction was not the victim")
	}
	status := &txstatus.Client{Server: e.dtm.URL()}
	wctx, cancel := context.WithTimeout(ctxb, 10*time.Second)
	st, _ := status.Wait(wctx, out.GID)
	cancel()
	orders, inbox := e.count(t, e.w.Tables.Orders, "idem_key = ?", key), e.count(t, e.w.Tables.Inbox, "idem_key = ?", key)
	if orders != 0 || inbox != 0 || st == txstatus.Succeed {
		t.Fatalf("%d orders of the key committed, %d published, DTM %s: want a local transaction that failed, nothing committed, nothing published", orders, inbox, st)
	}
	if !errors.Is(err, dtmmsg.ErrLocalFailed) || !errors.Is(err, record.ErrTxAborted) || out.Status != txstatus.Failed {
		t.Fatalf("Publish = %+v, %v: want ErrLocalFailed matching record.ErrTxAborted", out, err)
	}
	rec, rerr := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, key)
	if rerr != nil || rec.Status != idemkit.StatusFailed {
		t.Fatalf("record %+v, %v: want FAILED, the key free again", rec, rerr)
	}
}
