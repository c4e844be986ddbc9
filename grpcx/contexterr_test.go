package grpcx_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/memory"
)

// ctxFailing fails permanently with an error that wraps a context error (a downstream call's
// deadline, which this business treats as final).
type ctxFailing struct{ runs atomic.Int64 }

func (c *ctxFailing) Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	c.runs.Add(1)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-ledger-entry", "42"))
	return nil, idemkit.Permanent(fmt.Errorf("quote expired: %w", context.DeadlineExceeded))
}

// TestPermanentContextErrorReplaysItsCode: gRPC answers a non-status handler error that wraps a
// context error with that error's code (DEADLINE_EXCEEDED here); the duplicate of such a permanent
// failure got UNKNOWN, the stored status having been converted otherwise (found by a defect hunt).
func TestPermanentContextErrorReplaysItsCode(t *testing.T) {
	guard, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	biz := &ctxFailing{}
	cc := mustClient(t, serveGuarded(t, guard, biz))
	ctx := grpcx.WithKey(context.Background(), "k-ctx-1")
	var h1, h2 metadata.MD
	_, err1 := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}), grpc.Header(&h1))
	_, err2 := chaosrpc.Charge(ctx, cc, charge(map[string]any{"amount": 1}), grpc.Header(&h2))
	s1, s2 := status.Convert(err1), status.Convert(err2)
	t.Logf("first: %v (header %v); duplicate: %v (header %v); runs %d", s1, h1, s2, h2, biz.runs.Load())
	if biz.runs.Load() != 1 {
		t.Fatalf("handler ran %d times", biz.runs.Load())
	}
	if s1.Code() != s2.Code() || s1.Message() != s2.Message() {
		t.Errorf("duplicate answered %v, the original was %v", s2.Code(), s1.Code())
	}
}
