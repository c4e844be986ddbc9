package chaosrpc

import (
	"bytes"
	"context"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"gorm.io/gorm"

	spb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/record"
)

// check reads the ledger, the balances and the records and compares them with every answer.
func check(ctx context.Context, db *gorm.DB, t Tables, keys []op, answers map[string][]answer, rep *Report, violate func(string, ...any)) {
	type row struct {
		OpKey  string
		N      int
		ID     int64
		Amount int64
	}
	var rows []row
	if err := db.WithContext(ctx).Raw("SELECT op_key, COUNT(*) AS n, MIN(id) AS id, SUM(amount) AS amount FROM " + t.Ledger + " GROUP BY op_key").Scan(&rows).Error; err != nil {
		violate("reading the ledger: %v", err)
		return
	}
	ledger := make(map[string]row, len(rows))
	var effects int64
	for _, r := range rows {
		ledger[r.OpKey] = r
		rep.LedgerRows += r.N
		effects += r.Amount
		if r.N > 1 {
			violate("key %s took effect %d times", r.OpKey, r.N)
		}
	}
	var balance int64
	if err := db.WithContext(ctx).Raw("SELECT COALESCE(SUM(balance), 0) FROM " + t.Accounts).Scan(&balance).Error; err != nil {
		violate("reading balances: %v", err)
		return
	}
	if spent := initialBalance*(accounts-1) - balance; spent != effects {
		violate("money not conserved: accounts lost %d, the ledger says %d", spent, effects)
	}

	store, err := record.New(db, &record.Options{Table: t.Records})
	if err != nil {
		violate("record store: %v", err)
		return
	}
	guard, err := idemkit.New(store, nil)
	if err != nil {
		violate("guard: %v", err)
		return
	}
	for _, o := range keys {
		as := answers[o.key]
		if len(as) == 0 {
			continue // reported as unanswered already
		}
		first := as[0]
		for _, a := range as[1:] {
			if a.code != first.code || !bytes.Equal(a.raw, first.raw) {
				violate("key %s: answers differ: %v %x vs %v %x", o.key, first.code, first.raw, a.code, a.raw)
			}
		}
		r, inLedger := ledger[o.key]
		want := codes.OK
		switch {
		case o.amount <= 0:
			want = codes.InvalidArgument
		case o.account == poorAccount:
			want = codes.FailedPrecondition
		}
		if first.code != want {
			violate("key %s: answered %v, want %v", o.key, first.code, want)
		}
		switch first.code {
		case codes.OK:
			rep.Succeeded++
			if !inLedger {
				violate("key %s answered OK but has no ledger row", o.key)
			} else if id := int64(first.resp.GetFields()["ledger_id"].GetNumberValue()); id != r.ID {
				violate("key %s answered ledger id %d, the ledger has %d", o.key, id, r.ID)
			}
		default:
			rep.Rejected++
			if inLedger {
				violate("key %s answered %v but took effect", o.key, first.code)
			}
			var p spb.Status
			if err := proto.Unmarshal(first.raw, &p); err != nil {
				violate("key %s: status not decodable: %v", o.key, err)
				break
			}
			st := status.FromProto(&p)
			switch {
			case st.Code() == codes.InvalidArgument && !hasDetail[*errdetails.BadRequest](st),
				st.Code() == codes.FailedPrecondition && !hasDetail[*errdetails.ErrorInfo](st):
				violate("key %s: %v answered without its detail: %v", o.key, st.Code(), st.Details())
			}
		}
		rec, err := guard.Get(ctx, ChargeMethod, o.key)
		switch {
		case err != nil:
			violate("key %s: reading its record: %v", o.key, err)
		case first.code == codes.OK && rec.Status != idemkit.StatusSucceeded,
			first.code != codes.OK && rec.Status != idemkit.StatusRejected:
			violate("key %s answered %v, its record is %s", o.key, first.code, rec.Status)
		}
	}
}
