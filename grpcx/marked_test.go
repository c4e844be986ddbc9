package grpcx_test

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/memory"
)

// declines marks its status error permanent with idemkit.Permanent, as the README says a handler
// may, whatever the code.
type declines struct{ runs atomic.Int64 }

func (d *declines) Charge(context.Context, *structpb.Struct) (*structpb.Struct, error) {
	d.runs.Add(1)
	st, err := status.New(codes.Internal, "card declined").WithDetails(&errdetails.ErrorInfo{Reason: "DECLINED"})
	if err != nil {
		return nil, err
	}
	return nil, idemkit.Permanent(st.Err())
}

// TestMarkedStatusKeepsItsMessage: a status error marked with idemkit.Permanent reached the client
// with the mark's text for its message — gRPC takes a wrapped status's whole Error() text, so the
// caller read "rpc error: code = Internal desc = card declined" — and that was stored and replayed. The
// mark adds nothing: the first call and its duplicates get the status the handler made, message and
// details (found by a defect hunt).
func TestMarkedStatusKeepsItsMessage(t *testing.T) {
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
		biz := &declines{}
		cc := mustClient(t, serveGuardedWith(t, guard, opts, biz))
		ctx := grpcx.WithKey(context.Background(), "k-marked")
		for i := range 2 {
			var hdr metadata.MD
			_, err := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}), grpc.Header(&hdr))
			st := status.Convert(err)
			if st.Code() != codes.Internal || st.Message() != "card declined" || len(st.Details()) != 1 {
				t.Fatalf("Tx %v, call %d: code %v, message %q, details %v; want INTERNAL \"card declined\" with its ErrorInfo", tx, i+1, st.Code(), st.Message(), st.Details())
			}
			if i > 0 && len(hdr.Get(grpcx.ReplayedKey)) == 0 {
				t.Fatalf("Tx %v, call %d: not replayed", tx, i+1)
			}
		}
		if n := biz.runs.Load(); n != 1 {
			t.Fatalf("Tx %v: handler ran %d times, want 1 (stored)", tx, n)
		}
	}
}
