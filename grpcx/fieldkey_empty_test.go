package grpcx_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/internal/chaosrpc"
	"github.com/idemkit/idemkit/memory"
)

// TestFieldKeyEmptyIsInvalid: a key field the request sets to the empty string — a Struct request's
// {"request_id": ""}, or a field with presence set to "" — is a key the client sent, malformed, as an
// empty idempotency-key metadata value is (and httpx's {"id":""} with JSONFields): INVALID_ARGUMENT,
// the handler not run. FieldKey took it for no key: the call ran unguarded, every retry again, and
// every such request of every client shared nothing to stop it. Only a field the request leaves
// unset (or a proto3 field without presence, where "" cannot be told from unset) is no key.
func TestFieldKeyEmptyIsInvalid(t *testing.T) {
	guard, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	biz := &counter{}
	addr := serveGuardedWith(t, guard, &grpcx.Options{Key: grpcx.FieldKey("request_id")}, biz)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })

	req := charge(map[string]any{"request_id": "", "amount": 5})
	for i := range 2 {
		_, err := chaosrpc.Charge(context.Background(), cc, req)
		if status.Code(err) != codes.InvalidArgument || biz.runs.Load() != 0 {
			t.Fatalf("call %d with an empty request_id: %v, handler ran %d times; want INVALID_ARGUMENT, never run", i+1, err, biz.runs.Load())
		}
	}
	// An absent or null field is still no key: the call passes through unguarded.
	for _, fields := range []map[string]any{{"amount": 5}, {"request_id": nil, "amount": 5}} {
		if _, err := chaosrpc.Charge(context.Background(), cc, charge(fields)); err != nil {
			t.Fatalf("%v: %v, want the call passed through", fields, err)
		}
	}

	// A generated message's field with presence (proto2, proto3 optional) set to "" or empty bytes.
	for _, m := range []proto.Message{
		&descriptorpb.FileDescriptorProto{Name: proto.String("")},
		&descriptorpb.UninterpretedOption{StringValue: []byte{}},
	} {
		name := "name"
		if _, ok := m.(*descriptorpb.UninterpretedOption); ok {
			name = "string_value"
		}
		key, err := grpcx.FieldKey(name)(context.Background(), "/s/M", m)
		if !errors.Is(err, idemkit.ErrInvalidKey) {
			t.Errorf("%T with %s set empty: key %q, error %v; want an invalid key", m, name, key, err)
		}
	}
	if key, err := grpcx.FieldKey("name")(context.Background(), "/s/M", &descriptorpb.FileDescriptorProto{}); key != "" || err != nil {
		t.Errorf("unset field: key %q, error %v; want no key", key, err)
	}
}
