package grpcx_test

import (
	"context"
	"sync/atomic"
	"testing"

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

// failing is a Payments business that answers every call with the status code in its request's
// "code" field, counting its runs.
type failing struct{ runs atomic.Int64 }

func (f *failing) Charge(_ context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	f.runs.Add(1)
	return nil, status.Error(codes.Code(req.GetFields()["code"].GetNumberValue()), "refused by the business")
}

// TestGuardClassifierAndPermanentCodesBothStore: what the Guard's own classifier
// (idemkit.Options.IsPermanent) calls permanent and what grpcx's Options.Permanent does are both
// stored and replayed with their status. Before, the interceptor asked only the default classifier:
// a code the Guard's classifier made permanent was stored without its status (duplicates got
// UNKNOWN), and a permanent code the Guard's classifier did not know was not stored at all (the
// handler ran again).
func TestGuardClassifierAndPermanentCodesBothStore(t *testing.T) {
	for _, tc := range []struct {
		name      string
		permanent func(error) bool
		code      codes.Code
	}{
		{"the Guard's classifier", func(err error) bool { return status.Code(err) == codes.ResourceExhausted }, codes.ResourceExhausted},
		{"grpcx's permanent codes", func(error) bool { return false }, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guard, err := idemkit.New(memory.NewStore(), &idemkit.Options{IsPermanent: tc.permanent})
			if err != nil {
				t.Fatal(err)
			}
			biz := &failing{}
			cc := mustClient(t, serveGuarded(t, guard, biz))

			req := charge(map[string]any{"code": float64(tc.code)})
			ctx := grpcx.WithKey(context.Background(), "k-"+tc.code.String())
			for i := range 3 {
				var hdr metadata.MD
				_, err := chaosrpc.Charge(ctx, cc, req, grpc.Header(&hdr))
				if got := status.Code(err); got != tc.code {
					t.Fatalf("call %d: %v, want %v", i, err, tc.code)
				}
				if i > 0 && (len(hdr.Get(grpcx.ReplayedKey)) == 0 || status.Convert(err).Message() != "refused by the business") {
					t.Fatalf("call %d: %v, header %v: want the stored answer replayed", i, err, hdr)
				}
			}
			if n := biz.runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1", n)
			}
			rec, err := guard.Get(context.Background(), chaosrpc.ChargeMethod, "k-"+tc.code.String())
			if err != nil || rec.Status != idemkit.StatusRejected {
				t.Fatalf("record %+v, %v: want REJECTED", rec, err)
			}
		})
	}
}
