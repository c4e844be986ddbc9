package grpcx_test

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/memory"
)

// notYet fails its first call with a status whose code Options.Permanent calls permanent, marked
// idemkit.Retryable by the handler (the account is not replicated yet), and succeeds after.
type notYet struct{ runs atomic.Int64 }

func (n *notYet) Charge(context.Context, *structpb.Struct) (*structpb.Struct, error) {
	if n.runs.Add(1) == 1 {
		return nil, idemkit.Retryable(status.Error(codes.NotFound, "account not replicated yet"))
	}
	return structpb.NewStruct(map[string]any{"status": "charged"})
}

// TestRetryableMarkOverridesPermanentCode: a handler's status error marked with idemkit.Retryable is
// retryable whatever its code, as the mark is for the Guard's classifier; grpcx's Options.Permanent
// (DefaultPermanent: NOT_FOUND) stored it REJECTED and replayed it to every retry.
func TestRetryableMarkOverridesPermanentCode(t *testing.T) {
	for _, tx := range []bool{false, true} {
		store := memory.NewStore()
		guard, err := idemkit.New(store, nil)
		if err != nil {
			t.Fatal(err)
		}
		opts := &grpcx.Options{}
		if tx {
			opts.Tx = store
		}
		biz := &notYet{}
		cc := mustClient(t, serveGuardedWith(t, guard, opts, biz))
		ctx := grpcx.WithKey(context.Background(), "k-retry-mark")
		_, err = chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}))
		if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "account not replicated yet" {
			t.Fatalf("Tx %v, first call: %v; want NOT_FOUND \"account not replicated yet\"", tx, err)
		}
		resp, err := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}))
		if err != nil || resp.GetFields()["status"].GetStringValue() != "charged" {
			t.Fatalf("Tx %v, retry: %v, %v; want the handler run again and charged", tx, resp, err)
		}
		if n := biz.runs.Load(); n != 2 {
			t.Fatalf("Tx %v: handler ran %d times, want 2", tx, n)
		}
	}
}
