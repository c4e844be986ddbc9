package grpcx_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/record"
)

// badReceipt is a Payments business whose effect (a charge, counted) happens and whose response
// cannot be encoded: a proto string field holding bytes that are not UTF-8.
type badReceipt struct{ runs atomic.Int64 }

func (b *badReceipt) Charge(context.Context, *structpb.Struct) (*structpb.Struct, error) {
	b.runs.Add(1)
	return &structpb.Struct{Fields: map[string]*structpb.Value{"receipt": structpb.NewStringValue("\xff\xfe")}}, nil
}

// TestExecuteUnencodableResponseRunsOnce: in Execute mode a handler whose response cannot be encoded for
// the record had run and made its effect, yet the key was recorded FAILED: every retry with the key ran
// the handler, and its effect, again. The key is now recorded REJECTED without a response, as the Guard
// records a result its Store cannot hold, and the first call and every retry are answered UNKNOWN.
func TestExecuteUnencodableResponseRunsOnce(t *testing.T) {
	for _, backend := range []string{"memory", "mariadb+redis"} {
		t.Run(backend, func(t *testing.T) {
			var guard *idemkit.Guard
			var err error
			if backend == "memory" {
				guard, err = idemkit.New(memory.NewStore(), nil)
			} else {
				var rdb redis.UniversalClient = testsvc.Redis(t)
				store := mysqlRecords(t, "grpcx_unenc_")
				prefix := store.Table() + ":"
				testsvc.CleanRedis(t, rdb, prefix)
				guard, err = idemkit.New(store, &idemkit.Options{Locker: lock.New(rdb, &lock.Options{Prefix: prefix})})
			}
			if err != nil {
				t.Fatal(err)
			}
			biz := &badReceipt{}
			cc := mustClient(t, serveGuarded(t, guard, biz))
			ctx := grpcx.WithKey(context.Background(), "k-unencodable")
			var codes3 [3]codes.Code
			for i := range codes3 {
				_, err := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}))
				codes3[i] = status.Code(err)
			}
			if n := biz.runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times for one key (answers %v): want once, its effect happened", n, codes3)
			}
			if codes3 != [3]codes.Code{codes.Unknown, codes.Unknown, codes.Unknown} {
				t.Fatalf("answers %v: want UNKNOWN for the first call and every retry", codes3)
			}
			rec, err := guard.Get(context.Background(), chaosrpc.ChargeMethod, "k-unencodable")
			if err != nil {
				t.Fatal(err)
			}
			if rec.Status != idemkit.StatusRejected || len(rec.Response) != 0 {
				t.Fatalf("record %s with %d bytes of response (%q): want REJECTED without one", rec.Status, len(rec.Response), rec.Error)
			}
		})
	}
}

// badLedger is badReceipt writing a ledger row through the Tx-mode transaction first.
type badLedger struct {
	badReceipt
	table string
}

func (b *badLedger) Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	if err := record.GormTx(grpcx.TxFromContext(ctx)).Exec("INSERT INTO " + b.table + " (entry) VALUES (1)").Error; err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return b.badReceipt.Charge(ctx, req)
}

// TestTxUnencodableResponseRollsBack: in Tx mode a response that cannot be encoded for the record
// rolls the handler's writes back, as any failure does: nothing took effect, nothing is recorded, and
// a retry with the key runs again (each answered UNKNOWN, never a code saying the key is done).
func TestTxUnencodableResponseRollsBack(t *testing.T) {
	db := testsvc.MySQL(t, nil)
	store := recordsIn(t, db, "grpcx_unenc_tx_")
	guard, err := idemkit.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	biz := &badLedger{table: ledgerTable(t, db)}
	cc := mustClient(t, serveGuardedWith(t, guard, &grpcx.Options{Tx: store}, biz))
	ctx := grpcx.WithKey(context.Background(), "k-unencodable-tx")
	for i := range 2 {
		if _, err := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1})); status.Code(err) != codes.Unknown {
			t.Fatalf("call %d: %v, want UNKNOWN", i+1, err)
		}
	}
	var rows int64
	if err := db.Raw("SELECT COUNT(*) FROM " + biz.table).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if n := biz.runs.Load(); n != 2 || rows != 0 {
		t.Fatalf("handler ran %d times, %d ledger rows: want each retry run, every write rolled back", n, rows)
	}
	rec, err := guard.Get(context.Background(), chaosrpc.ChargeMethod, "k-unencodable-tx")
	switch {
	case errors.Is(err, idemkit.ErrNotFound):
	case err != nil:
		t.Fatal(err)
	case rec.Status != idemkit.StatusFailed:
		t.Fatalf("record %s %q: want none, or FAILED", rec.Status, rec.Error)
	}
}
