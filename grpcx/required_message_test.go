package grpcx_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/memory"
)

// TestRequiredKeyMessageNamesTheSource: a Required method's INVALID_ARGUMENT for a call without a
// key said the key goes in the "idempotency-key" metadata, also where Options.Key reads it from a
// request field (FieldKey), so a client following it sent metadata the server does not read and got
// the same answer again. The metadata is named only when the key comes from it (found by a defect
// hunt).
func TestRequiredKeyMessageNamesTheSource(t *testing.T) {
	guard, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	handler := func(context.Context, any) (any, error) { t.Fatal("handler ran"); return nil, nil }
	info := &grpc.UnaryServerInfo{FullMethod: "/p.S/M"}
	required := func(string) bool { return true }
	for _, tc := range []struct {
		name     string
		opts     *grpcx.Options
		metadata bool
	}{
		{"metadata key (default)", &grpcx.Options{Required: required}, true},
		{"request field", &grpcx.Options{Required: required, Key: grpcx.FieldKey("request_id")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := grpcx.UnaryServerInterceptor(guard, tc.opts)(context.Background(), charge(map[string]any{"amount": 1}), info, handler)
			msg := status.Convert(err).Message()
			if status.Code(err) != codes.InvalidArgument || strings.Contains(msg, grpcx.MetadataKey) != tc.metadata {
				t.Fatalf("%v: want INVALID_ARGUMENT, naming the %q metadata: %v", err, grpcx.MetadataKey, tc.metadata)
			}
		})
	}
}
