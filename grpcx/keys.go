package grpcx

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit"
)

// KeyFunc returns the idempotency key of a call to method with request req, or "" when the call has
// none. An error is answered INVALID_ARGUMENT and nothing runs. req is nil when the request is not a
// proto message (a service served with another codec): such a call passes through when it has no
// key, and is refused INTERNAL when it has one (there is no proto encoding to fingerprint).
type KeyFunc func(ctx context.Context, method string, req proto.Message) (string, error)

// MetadataKeyFunc reads the key from the incoming metadata field name (e.g. [MetadataKey]; compared
// ignoring case, as gRPC does). Repeated values must be equal: a call carrying two different keys is
// an error, and so is an empty value (a key the client sent, malformed: never a call without a key,
// which would run unguarded). A binary field (a name ending in "-bin", in any case) carries bytes,
// not text: its key is idemkit.DerivedKey of them (the bytes themselves when they are a valid key,
// else their hash). It panics when name is not a metadata name (empty, or holding a character
// other than a letter, digit, '-', '_' or '.'): no call would ever carry it.
func MetadataKeyFunc(name string) KeyFunc {
	if !isMetadataName(name) {
		panic(fmt.Sprintf("grpcx: MetadataKeyFunc: %q is not a metadata name", name))
	}
	binary := strings.HasSuffix(strings.ToLower(name), "-bin")
	return func(ctx context.Context, _ string, _ proto.Message) (string, error) {
		vals := metadata.ValueFromIncomingContext(ctx, name)
		if len(vals) == 0 {
			return "", nil
		}
		for _, v := range vals[1:] {
			if v != vals[0] {
				return "", fmt.Errorf("grpcx: metadata %q carries %d different keys", name, len(vals))
			}
		}
		if vals[0] == "" {
			return "", fmt.Errorf("%w: metadata %q is empty", idemkit.ErrInvalidKey, name)
		}
		if binary {
			return idemkit.DerivedKey(vals[0]), nil
		}
		return vals[0], nil
	}
}

// FieldKey reads the key from the request's top-level field name (its proto name, e.g. "request_id"):
// a string, integer or bytes field of a generated message, or the string or number under name in a
// google.protobuf.Struct request. A bytes field's key is idemkit.DerivedKey of its bytes: the bytes
// themselves when they are a valid key (text), else their hash, so a binary id (a raw UUID) works.
// An unset field (or a null Struct value) means no key. One set to the empty string or empty bytes
// is an invalid key (INVALID_ARGUMENT, as an empty metadata value is), never taken for no key; a
// request can only be seen to set it so when the field has presence (a Struct member, a proto2 or
// proto3 optional field, a oneof member): a proto3 field without presence left empty is unset. A
// field of another kind, or a message without the field, is an error. It panics when name is empty.
func FieldKey(name string) KeyFunc {
	if name == "" {
		panic("grpcx: FieldKey: empty field name")
	}
	return func(_ context.Context, _ string, req proto.Message) (string, error) {
		if req == nil {
			return "", nil
		}
		if s, ok := req.(*structpb.Struct); ok {
			v, ok := s.GetFields()[name]
			if !ok {
				return "", nil
			}
			switch k := v.GetKind().(type) {
			case *structpb.Value_StringValue:
				if k.StringValue == "" {
					return "", emptyField(name)
				}
				return k.StringValue, nil
			case *structpb.Value_NumberValue:
				return strconv.FormatFloat(k.NumberValue, 'g', -1, 64), nil
			case *structpb.Value_NullValue:
				return "", nil
			}
			return "", fmt.Errorf("grpcx: key field %q is not a string or number", name)
		}
		m := req.ProtoReflect()
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
		if fd == nil || fd.IsList() || fd.IsMap() {
			return "", fmt.Errorf("grpcx: %s has no singular field %q", m.Descriptor().FullName(), name)
		}
		if !m.Has(fd) {
			return "", nil
		}
		v := m.Get(fd)
		switch fd.Kind() {
		case protoreflect.StringKind:
			if v.String() == "" { // set, with presence (proto2, proto3 optional, a oneof member)
				return "", emptyField(name)
			}
			return v.String(), nil
		case protoreflect.BytesKind:
			if len(v.Bytes()) == 0 {
				return "", emptyField(name)
			}
			return idemkit.DerivedKey(string(v.Bytes())), nil
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
			protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
			return strconv.FormatInt(v.Int(), 10), nil
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			return strconv.FormatUint(v.Uint(), 10), nil
		}
		return "", fmt.Errorf("grpcx: key field %q of %s is a %s", name, m.Descriptor().FullName(), fd.Kind())
	}
}

// isMetadataName reports whether name, in lower case, is a gRPC metadata name: one or more of
// [0-9a-z-_.] (a pseudo-header such as ":authority" is not one).
func isMetadataName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range strings.ToLower(name) {
		if !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// emptyField is the error for a key field the request sets to the empty string (or bytes): a key the
// client sent, malformed, as an empty metadata value is — not a call without a key, which would run
// unguarded every time it is retried.
func emptyField(name string) error {
	return fmt.Errorf("%w: key field %q is set but empty", idemkit.ErrInvalidKey, name)
}

// FirstOf returns the first non-empty key among fns, tried in order; the first error stops the search.
// It panics when fns is empty or holds a nil KeyFunc.
func FirstOf(fns ...KeyFunc) KeyFunc {
	if len(fns) == 0 {
		panic("grpcx: FirstOf: no KeyFunc")
	}
	for _, f := range fns {
		if f == nil {
			panic("grpcx: FirstOf: nil KeyFunc")
		}
	}
	fns = slices.Clone(fns)
	return func(ctx context.Context, method string, req proto.Message) (string, error) {
		for _, f := range fns {
			k, err := f(ctx, method, req)
			if err != nil || k != "" {
				return k, err
			}
		}
		return "", nil
	}
}
