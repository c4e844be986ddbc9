package chaosrpc

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/record"
)

// TestCheckComparesAnswersWithTheRecordAndTheLedger: the checker reads the record's stored response
// with plain SQL and wants every answer byte-identical to it and it to name the key's ledger row. A
// record that is SUCCEEDED, as answered, but holds another response (a replay answered identically,
// from elsewhere) or a response naming another effect is a violation; the old checker compared only
// the record's status, read through the Guard.
func TestCheckComparesAnswersWithTheRecordAndTheLedger(t *testing.T) {
	db := testsvc.MySQL(t, nil)
	ctx := context.Background()
	sqlDB, err := sql.Open("mysql", testsvc.MySQLDSN()+testsvc.Database)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	marshal := func(m proto.Message) []byte {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const amount = 5
	for _, tc := range []struct {
		name      string
		storedPID float64 // the pid in the stored response; the answer's is 1
		amount    float64 // the amount in the stored and answered response; the ledger's is 5
		want      string  // a violation containing this, or "" for none
	}{
		{"consistent", 1, 5, ""},
		{"stored response is not the answer", 2, 5, "not its record's response"},
		{"response names another effect", 1, 6, "not its effect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tables := NewTables(testsvc.Name("rpccheck"))
			t.Cleanup(func() { _ = tables.Drop(context.Background(), db) })
			if err := tables.Create(ctx, db, accounts, initialBalance); err != nil {
				t.Fatal(err)
			}
			o := op{key: "k1", account: 1, amount: amount}
			for _, q := range []string{
				"UPDATE " + tables.Accounts + " SET balance = balance - 5 WHERE id = 1",
				"UPDATE " + tables.Accounts + " SET balance = 0 WHERE id = 10",
				"INSERT INTO " + tables.Ledger + " (op_key, account, amount, pid) VALUES ('k1', 1, 5, 1)",
			} {
				if err := db.Exec(q).Error; err != nil {
					t.Fatal(err)
				}
			}
			resp := func(pid float64) *structpb.Struct {
				s, err := structpb.NewStruct(map[string]any{"ledger_id": 1, FieldKey: o.key,
					FieldAccount: float64(o.account), FieldAmount: tc.amount, "pid": pid})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			store, err := record.New(db, &record.Options{Table: tables.Records})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			if err := store.Insert(ctx, &idemkit.Record{Scope: ChargeMethod, Key: o.key, Status: idemkit.StatusSucceeded,
				Fence: 1, Owner: "o", Response: marshal(&anypb.Any{TypeUrl: structTypeURL, Value: marshal(resp(tc.storedPID))}),
				LeaseUntil: now.Add(time.Minute), CreatedAt: now, UpdatedAt: now}); err != nil {
				t.Fatal(err)
			}
			a := answer{code: codes.OK, raw: marshal(resp(1)), resp: resp(1)}
			var violations []string
			check(ctx, sqlDB, tables, []op{o}, map[string][]answer{o.key: {a, a}}, &Report{}, func(f string, args ...any) {
				violations = append(violations, fmt.Sprintf(f, args...))
			})
			switch {
			case tc.want == "" && len(violations) > 0:
				t.Fatalf("violations on consistent tables: %q", violations)
			case tc.want != "" && (len(violations) != 1 || !strings.Contains(violations[0], tc.want)):
				t.Fatalf("violations %q, want one saying %q", violations, tc.want)
			}
		})
	}
}
