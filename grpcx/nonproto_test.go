package grpcx_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/memory"
)

// TestNonProtoCallWithoutKeyPassesThrough: a call without a key passes through unguarded (the zero
// Options guard every method, and only calls that carry a key are guarded). A request that is not a
// proto message — a service served with another codec (flatbuffers, JSON structs) on the same
// server — was refused INTERNAL before its key was even looked for: every call of such a service
// failed. It passes through without a key; only a call with a key, which needs the proto encoding
// for its fingerprint, is refused (found by a defect hunt).
func TestNonProtoCallWithoutKeyPassesThrough(t *testing.T) {
	guard, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	intercept := grpcx.UnaryServerInterceptor(guard, nil)
	info := &grpc.UnaryServerInfo{FullMethod: "/flat.Orders/Create"}
	type flatRequest struct{ Item string }
	ran := 0
	handler := func(context.Context, any) (any, error) { ran++; return "created", nil }

	resp, err := intercept(context.Background(), &flatRequest{Item: "book"}, info, handler)
	if err != nil || resp != "created" || ran != 1 {
		t.Fatalf("no key: %v, %v, handler ran %d times; want it passed through", resp, err, ran)
	}
	keyed := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcx.MetadataKey, "k1"))
	if _, err := intercept(keyed, &flatRequest{Item: "book"}, info, handler); status.Code(err) != codes.Internal || ran != 1 {
		t.Fatalf("with a key: %v, handler ran %d times; want INTERNAL and no run (no fingerprint)", err, ran)
	}
}
