package dtmmsg_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dtm-labs/client/dtmcli"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/dtmmsg"
	"github.com/idemkit/idemkit/internal/chaosdtmmsg"
	"github.com/idemkit/idemkit/txstatus"
)

// TestStepsMustNotChangeTheGID: Steps gets the dtmcli message and could change its Gid or TransType.
// The message was then prepared and submitted under that gid (or as that type) while the local
// transaction entered the barrier under the record's: DTM's back-check of the message found no
// barrier row and answered FAILURE — a message whose local transaction committed was never published
// — and no wait, query or Reconciler of the record's gid followed it. Such a change is refused before
// anything is sent, as saga's and tcc's are: Local does not run, the record is rolled back, the key
// free again.
func TestStepsMustNotChangeTheGID(t *testing.T) {
	for _, field := range []string{"Gid", "TransType"} {
		t.Run(field, func(t *testing.T) {
			e := setup(t)
			pub := e.w.Publisher(e.dtm.URL(), e.svc, 5*time.Second)
			status := &txstatus.Client{Server: e.dtm.URL()}
			other := dtmmsg.GIDPrefix + txstatus.NewGID()
			key := "g-" + field
			out, err := pub.Publish(ctxb, dtmmsg.PublishParams{
				Call: idemkit.Call{Scope: chaosdtmmsg.Scope, Key: key},
				Steps: func(m *dtmcli.Msg) {
					m.Add(e.svc+"/inbox", chaosdtmmsg.Order{Key: key, Amount: 7})
					m.RetryInterval, m.TimeoutToFail = 1, 1 // back-checked after about a second
					switch field {
					case "Gid":
						m.Gid = other
					case "TransType":
						m.TransType = "saga"
					}
				},
				Local: func(ctx context.Context, tx *gorm.DB, gid string) error {
					if err := tx.Exec("INSERT INTO "+e.w.Tables.Orders+" (gid, idem_key, amount) VALUES (?, ?, 7)", gid, key).Error; err != nil {
						return err
					}
					time.Sleep(2500 * time.Millisecond) // a local transaction longer than TimeoutToFail: DTM back-checks meanwhile
					return nil
				},
				Result: []byte(`{"order":"` + key + `"}`),
			})
			t.Logf("Publish = %+v, %v", out, err)
			if orders := e.count(t, e.w.Tables.Orders, "idem_key = ?", key); orders != 0 {
				// Before the fix: the local transaction committed, and DTM's back-check of the other gid
				// answered FAILURE (or the message ran as another type).
				wctx, cancel := context.WithTimeout(ctxb, 10*time.Second)
				for _, gid := range []string{out.GID, other} {
					st, _ := status.Wait(wctx, gid)
					t.Logf("DTM: %s %s", gid, st)
				}
				cancel()
				t.Errorf("the local transaction ran and committed (%d orders, %d published) although Steps changed the message's %s: want nothing run, nothing sent",
					orders, e.count(t, e.w.Tables.Inbox, "idem_key = ?", key), field)
			}
			for _, gid := range []string{out.GID, other} {
				if st, serr := status.Status(ctxb, gid); serr != nil || st != txstatus.Unknown {
					t.Errorf("DTM holds %s (%s, %v) although Steps changed the message's %s: want nothing prepared", gid, st, serr, field)
				}
			}
			if err == nil || !strings.Contains(err.Error(), "must not change") || !errors.Is(err, txstatus.ErrRefused) ||
				out.Status != txstatus.Failed || !errors.Is(out.Reason, txstatus.ErrRefused) {
				t.Errorf("Publish = %+v, %v; want Failed and an error saying Steps must not change the message's %s, matching txstatus.ErrRefused", out, err, field)
			}
			rec, rerr := e.w.Guard.Get(ctxb, chaosdtmmsg.Scope, key)
			if rerr != nil || rec.Status != idemkit.StatusFailed || rec.GID != out.GID {
				t.Errorf("record %+v, %v: want FAILED with the publication's gid, the key free again", rec, rerr)
			}
			retry, err := e.w.PublishOrder(ctxb, e.w.Publisher(e.dtm.URL(), e.svc, 20*time.Second), e.svc, key, 7, nil)
			if err != nil || retry.Status != txstatus.Succeed || retry.Replayed {
				t.Fatalf("retry: %+v, %v", retry, err)
			}
		})
	}
}
