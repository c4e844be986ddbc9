package grpcx

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestKeyFuncs(t *testing.T) {
	md := func(pairs ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(pairs...))
	}
	st, _ := structpb.NewStruct(map[string]any{"id": "abc", "n": 42, "obj": map[string]any{}})
	for _, tc := range []struct {
		name    string
		f       KeyFunc
		ctx     context.Context
		req     proto.Message
		want    string
		wantErr bool
	}{
		{"metadata", MetadataKeyFunc(MetadataKey), md(MetadataKey, "k1"), nil, "k1", false},
		{"metadata absent", MetadataKeyFunc(MetadataKey), md(), nil, "", false},
		{"metadata repeated equal", MetadataKeyFunc(MetadataKey), md(MetadataKey, "k", MetadataKey, "k"), nil, "k", false},
		{"metadata repeated different", MetadataKeyFunc(MetadataKey), md(MetadataKey, "a", MetadataKey, "b"), nil, "", true},
		{"struct string field", FieldKey("id"), md(), st, "abc", false},
		{"struct number field", FieldKey("n"), md(), st, "42", false},
		{"struct absent field", FieldKey("x"), md(), st, "", false},
		{"struct object field", FieldKey("obj"), md(), st, "", true},
		{"generated string field", FieldKey("value"), md(), wrapperspb.String("v1"), "v1", false},
		{"generated int field", FieldKey("value"), md(), wrapperspb.Int64(-7), "-7", false},
		{"generated unset field", FieldKey("value"), md(), wrapperspb.String(""), "", false},
		{"generated bool field", FieldKey("value"), md(), wrapperspb.Bool(true), "", true},
		{"generated no such field", FieldKey("nope"), md(), wrapperspb.String("v"), "", true},
		{"first of", FirstOf(MetadataKeyFunc(MetadataKey), FieldKey("id")), md(), st, "abc", false},
		{"first of prefers metadata", FirstOf(MetadataKeyFunc(MetadataKey), FieldKey("id")), md(MetadataKey, "m"), st, "m", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.f(tc.ctx, "/s/M", tc.req)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("got %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestDefaultPermanent(t *testing.T) {
	permanent := map[codes.Code]bool{
		codes.InvalidArgument: true, codes.NotFound: true, codes.AlreadyExists: true, codes.PermissionDenied: true,
		codes.FailedPrecondition: true, codes.OutOfRange: true, codes.Unimplemented: true,
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if got := DefaultPermanent(status.New(c, "")); got != permanent[c] {
			t.Errorf("%v: permanent %v, want %v", c, got, permanent[c])
		}
	}
}

func TestStoredForms(t *testing.T) {
	st, _ := structpb.NewStruct(map[string]any{"b": 1, "a": "x", "c": map[string]any{"z": 1, "y": 2}})
	b1, err := encodeResponse(st)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 { // map order must not change the stored bytes
		b2, _ := encodeResponse(proto.Clone(st))
		if string(b1) != string(b2) {
			t.Fatal("encoding is not deterministic")
		}
	}
	m, err := decodeResponse(b1, protoregistry.GlobalTypes)
	if err != nil || !proto.Equal(m, st) {
		t.Fatalf("decoded %v, %v", m, err)
	}
	if _, err := decodeResponse([]byte("junk"), protoregistry.GlobalTypes); err == nil {
		t.Fatal("junk decoded")
	}
	s1, _ := status.New(codes.NotFound, "gone").WithDetails(wrapperspb.String("detail"))
	b, err := encodeStatus(s1)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := decodeStatus(b)
	if err != nil || !proto.Equal(s1.Proto(), s2.Proto()) {
		t.Fatalf("status round trip: %v %v", s2, err)
	}
	f1, _ := fingerprint("/s/A", st)
	f2, _ := fingerprint("/s/B", st)
	f3, _ := fingerprint("/s/A", proto.Clone(st))
	if f1 == f2 || f1 != f3 {
		t.Fatal("fingerprint must depend on the method and only on the request's content")
	}
}
