package chaosrpc

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	spb "google.golang.org/genproto/googleapis/rpc/status"
)

// The checker is its own code path, as internal/chaos's is: it reads the tables with plain SQL
// through database/sql (not gorm, not package record, not the Guard) and decodes the stored answers
// itself, so a defect in the Store's or the Guard's reads cannot hide what the tables hold.

// structTypeURL is the type URL of a stored Charge response: grpcx stores a successful response as
// a google.protobuf.Any of it, encoded deterministically, and a permanent error as its
// google.rpc.Status (the answer's metadata would follow, and Charge sets none).
const structTypeURL = "type.googleapis.com/google.protobuf.Struct"

type chkEffect struct {
	id, amount int64
	account    int
}

type chkRecord struct {
	scope, key, status string
	response           []byte
}

// check reads the ledger, the balances and the records and compares them with every answer: each
// answer of a key, the first and every replay, byte for byte with the response its record stores,
// and a SUCCEEDED record's response with the key's ledger row.
func check(ctx context.Context, db *sql.DB, t Tables, keys []op, answers map[string][]answer, rep *Report, violate func(string, ...any)) {
	requested := make(map[string]bool, len(keys))
	for _, o := range keys {
		requested[o.key] = true
	}
	ledger, err := readLedger(ctx, db, t.Ledger)
	if err != nil {
		violate("%v", err)
		return
	}
	var effects int64
	for key, es := range ledger {
		rep.LedgerRows += len(es)
		for _, e := range es {
			effects += e.amount
		}
		if !requested[key] {
			violate("ledger rows of key %s, which nobody requested", key)
		}
	}
	var balance int64
	if err := db.QueryRowContext(ctx, "SELECT COALESCE(SUM(balance), 0) FROM "+t.Accounts).Scan(&balance); err != nil {
		violate("reading balances: %v", err)
		return
	}
	if spent := initialBalance*(accounts-1) - balance; spent != effects {
		violate("money not conserved: accounts lost %d, the ledger says %d", spent, effects)
	}
	rows, err := readRecords(ctx, db, t.Records)
	if err != nil {
		violate("%v", err)
		return
	}
	records := make(map[string]chkRecord, len(rows))
	for _, r := range rows {
		switch _, dup := records[r.key]; {
		case !requested[r.key]:
			violate("record of key %s, which nobody requested (scope %q, %s)", r.key, r.scope, r.status)
		case dup:
			violate("key %s has more than one record (scopes %q and %q)", r.key, records[r.key].scope, r.scope)
		}
		records[r.key] = r
	}

	for _, o := range keys {
		es, inLedger := ledger[o.key]
		if len(es) > 1 {
			violate("key %s took effect %d times", o.key, len(es))
		}
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
			} else if id := int64(first.resp.GetFields()["ledger_id"].GetNumberValue()); id != es[0].id {
				violate("key %s answered ledger id %d, the ledger has %d", o.key, id, es[0].id)
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

		rec, ok := records[o.key]
		switch {
		case !ok:
			violate("key %s answered %v but has no record", o.key, first.code)
			continue
		case rec.scope != ChargeMethod:
			violate("key %s: record of scope %q, want %q", o.key, rec.scope, ChargeMethod)
		case first.code == codes.OK && rec.status != "SUCCEEDED",
			first.code != codes.OK && rec.status != "REJECTED":
			violate("key %s answered %v, its record is %s", o.key, first.code, rec.status)
			continue
		}
		var differ []int
		for i, a := range as {
			stored := a.raw // a rejection is stored as its google.rpc.Status
			if a.code == codes.OK {
				stored, _ = proto.MarshalOptions{Deterministic: true}.Marshal(&anypb.Any{TypeUrl: structTypeURL, Value: a.raw})
			}
			if !bytes.Equal(rec.response, stored) {
				differ = append(differ, i)
			}
		}
		if len(differ) > 0 {
			a := as[differ[0]]
			violate("key %s: %d of its %d answers are not its record's response: answered %v %x, stored %x",
				o.key, len(differ), len(as), a.code, a.raw, rec.response)
		}
		if rec.status == "SUCCEEDED" && inLedger {
			if msg := effectMatches(rec.response, o.key, es[0]); msg != "" {
				violate("key %s: its record's response is not its effect: %s", o.key, msg)
			}
		}
	}
}

// effectMatches compares a SUCCEEDED record's stored response with the key's ledger row; it returns
// "" when they agree.
func effectMatches(response []byte, key string, e chkEffect) string {
	var a anypb.Any
	if err := proto.Unmarshal(response, &a); err != nil {
		return fmt.Sprintf("not a google.protobuf.Any: %v", err)
	}
	if a.GetTypeUrl() != structTypeURL {
		return fmt.Sprintf("stored type %q, want %q", a.GetTypeUrl(), structTypeURL)
	}
	var s structpb.Struct
	if err := proto.Unmarshal(a.GetValue(), &s); err != nil {
		return fmt.Sprintf("not a google.protobuf.Struct: %v", err)
	}
	f := s.GetFields()
	got := fmt.Sprintf("ledger %v, %s %q, account %v, amount %v", f["ledger_id"].GetNumberValue(), FieldKey, f[FieldKey].GetStringValue(),
		f[FieldAccount].GetNumberValue(), f[FieldAmount].GetNumberValue())
	if want := fmt.Sprintf("ledger %v, %s %q, account %v, amount %v", float64(e.id), FieldKey, key, float64(e.account), float64(e.amount)); got != want {
		return "stored " + got + ", the ledger has " + want
	}
	return ""
}

// readLedger returns the ledger's rows by key, in id order.
func readLedger(ctx context.Context, db *sql.DB, table string) (map[string][]chkEffect, error) {
	rows, err := db.QueryContext(ctx, "SELECT id, op_key, account, amount FROM "+table+" ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("reading the ledger: %w", err)
	}
	defer rows.Close()
	out := map[string][]chkEffect{}
	for rows.Next() {
		var key string
		var e chkEffect
		if err := rows.Scan(&e.id, &key, &e.account, &e.amount); err != nil {
			return nil, fmt.Errorf("reading the ledger: %w", err)
		}
		out[key] = append(out[key], e)
	}
	return out, rows.Err()
}

// readRecords returns the record table's rows.
func readRecords(ctx context.Context, db *sql.DB, table string) ([]chkRecord, error) {
	rows, err := db.QueryContext(ctx, "SELECT scope, idem_key, status, response FROM "+table)
	if err != nil {
		return nil, fmt.Errorf("reading the records: %w", err)
	}
	defer rows.Close()
	var out []chkRecord
	for rows.Next() {
		var r chkRecord
		if err := rows.Scan(&r.scope, &r.key, &r.status, &r.response); err != nil {
			return nil, fmt.Errorf("reading the records: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
