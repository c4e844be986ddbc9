package grpcx_test

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/memory"
)

// rawRefusal refuses every charge INVALID_ARGUMENT with a message quoting raw bytes of the request
// (not UTF-8) and a BadRequest detail.
type rawRefusal struct{ runs atomic.Int64 }

func (r *rawRefusal) Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	r.runs.Add(1)
	st, err := status.New(codes.InvalidArgument, "unknown card \xff\xfe").WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "card", Description: "unknown"}},
	})
	if err != nil {
		return nil, err
	}
	return nil, st.Err()
}

// TestPermanentStatusWithNonUTF8MessageIsStored: a permanent status whose message is not valid
// UTF-8 (which a proto string must be) could not be encoded for the record, so it was not stored:
// every duplicate ran the handler again instead of getting the stored refusal.
func TestPermanentStatusWithNonUTF8MessageIsStored(t *testing.T) {
	guard, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	biz := &rawRefusal{}
	cc := mustClient(t, serveGuarded(t, guard, biz))
	ctx := grpcx.WithKey(context.Background(), "k-nonutf8-1")
	_, err1 := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}))
	_, err2 := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}))
	if n := biz.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want once (first %v, duplicate %v)", n, err1, err2)
	}
	s1, s2 := status.Convert(err1), status.Convert(err2)
	if s1.Code() != codes.InvalidArgument || s2.Code() != s1.Code() || len(s2.Details()) != 1 {
		t.Fatalf("first %v, duplicate %v (details %v): want INVALID_ARGUMENT replayed with its detail", s1, s2, s2.Details())
	}
}
