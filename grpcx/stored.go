package grpcx

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	spb "google.golang.org/genproto/googleapis/rpc/status"
)

// typeURLPrefix is the prefix of the type URLs of stored responses, as anypb.New writes them.
const typeURLPrefix = "type.googleapis.com/"

// deterministic marshals maps in key order, so equal messages encode to equal bytes in one binary.
var deterministic = proto.MarshalOptions{Deterministic: true}

// fingerprint hashes the full method name and the deterministic encoding of the request, each
// google.protobuf.Any in it re-encoded through r (see canonicalAnys): the same request to the same
// method always gives the same fingerprint, another request another one.
func fingerprint(method string, req proto.Message, r protoregistry.MessageTypeResolver, types *anyTypes) (string, error) {
	if types.canHold(req.ProtoReflect().Descriptor()) {
		req = canonicalAnys(req, r)
	}
	b, err := deterministic.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("grpcx: encoding request for its fingerprint: %w", err)
	}
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// anyName is the full name of google.protobuf.Any.
const anyName protoreflect.FullName = "google.protobuf.Any"

// anyTypes remembers, per message type, whether a google.protobuf.Any can stand in it at any depth
// (see canHoldAny): only requests of such types pay for canonicalAnys's walk of their fields.
type anyTypes struct{ m sync.Map } // protoreflect.FullName → bool

func (a *anyTypes) canHold(d protoreflect.MessageDescriptor) bool {
	if v, ok := a.m.Load(d.FullName()); ok {
		return v.(bool)
	}
	can := canHoldAny(d, map[protoreflect.FullName]bool{})
	a.m.Store(d.FullName(), can)
	return can
}

// canHoldAny reports whether a message of type d is or can hold a google.protobuf.Any, in a field
// (a list's element, a map's value) at any depth; seen holds the types already looked at (a type may
// hold itself).
func canHoldAny(d protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if d.FullName() == anyName {
		return true
	}
	if seen[d.FullName()] {
		return false
	}
	seen[d.FullName()] = true
	fields := d.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		if m := fd.Message(); m != nil && canHoldAny(m, seen) {
			return true
		}
	}
	return false
}

// canonicalAnys returns req, or, when it holds a google.protobuf.Any (at any depth), a copy of it
// in which each Any's value is the deterministic encoding of the message it packs, its type found
// through r. An Any's value is bytes its sender encoded, maps in the sender's order (random, in Go):
// packed again for a retry, the same message may come as other bytes. An Any of a type r does not
// know, or whose value does not decode, keeps its bytes.
func canonicalAnys(req proto.Message, r protoregistry.MessageTypeResolver) proto.Message {
	if !holdsAny(req.ProtoReflect()) {
		return req
	}
	c := proto.Clone(req)
	rewriteAnys(c.ProtoReflect(), r)
	return c
}

// holdsAny reports whether m is or holds a google.protobuf.Any.
func holdsAny(m protoreflect.Message) bool {
	if m.Descriptor().FullName() == anyName {
		return true
	}
	found := false
	eachMessage(m, func(m protoreflect.Message) bool {
		found = holdsAny(m)
		return !found
	})
	return found
}

// rewriteAnys re-encodes the value of each google.protobuf.Any in m, m itself included, in place.
func rewriteAnys(m protoreflect.Message, r protoregistry.MessageTypeResolver) {
	if m.Descriptor().FullName() != anyName {
		eachMessage(m, func(m protoreflect.Message) bool {
			rewriteAnys(m, r)
			return true
		})
		return
	}
	fields := m.Descriptor().Fields()
	typeURL, value := fields.ByName("type_url"), fields.ByName("value")
	if typeURL == nil || value == nil {
		return
	}
	mt, err := r.FindMessageByURL(m.Get(typeURL).String())
	if err != nil {
		return
	}
	inner := mt.New()
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(m.Get(value).Bytes(), inner.Interface()); err != nil {
		return
	}
	rewriteAnys(inner, r)
	b, err := proto.MarshalOptions{Deterministic: true, AllowPartial: true}.Marshal(inner.Interface())
	if err != nil {
		return
	}
	m.Set(value, protoreflect.ValueOfBytes(b))
}

// eachMessage calls f with each message in m's populated fields (a singular field, a list's
// elements, a map's values), until f returns false.
func eachMessage(m protoreflect.Message, f func(protoreflect.Message) bool) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			more := true
			v.Map().Range(func(_ protoreflect.MapKey, v protoreflect.Value) bool {
				more = f(v.Message())
				return more
			})
			return more
		case fd.Message() == nil:
			return true
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if !f(l.Get(i).Message()) {
					return false
				}
			}
			return true
		}
		return f(v.Message())
	})
}

// encodeResponse is the stored form of a successful response: a google.protobuf.Any naming its type,
// encoded deterministically.
func encodeResponse(m proto.Message) ([]byte, error) {
	b, err := deterministic.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("grpcx: encoding response: %w", err)
	}
	a := &anypb.Any{TypeUrl: typeURLPrefix + string(m.ProtoReflect().Descriptor().FullName()), Value: b}
	return deterministic.Marshal(a)
}

// decodeResponse turns a stored response back into a message of its type, found through r.
func decodeResponse(b []byte, r protoregistry.MessageTypeResolver) (proto.Message, error) {
	var a anypb.Any
	if err := proto.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("grpcx: decoding stored response: %w", err)
	}
	mt, err := r.FindMessageByURL(a.GetTypeUrl())
	if err != nil {
		return nil, fmt.Errorf("grpcx: stored response of type %q: %w", a.GetTypeUrl(), err)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(a.GetValue(), m); err != nil {
		return nil, fmt.Errorf("grpcx: decoding stored response of type %q: %w", a.GetTypeUrl(), err)
	}
	return m, nil
}

// encodeStatus is the stored form of a permanent error: its google.rpc.Status (code, message, details).
// A message that is not valid UTF-8, which a proto string must be, is stored with its invalid bytes
// replaced by U+FFFD: refused, the error would not be stored at all.
func encodeStatus(st *status.Status) ([]byte, error) {
	p := st.Proto()
	p.Message = strings.ToValidUTF8(p.GetMessage(), "\uFFFD")
	return deterministic.Marshal(p)
}

// decodeStatus turns a stored google.rpc.Status back into a status.
func decodeStatus(b []byte) (*status.Status, error) {
	var p spb.Status
	if err := proto.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("grpcx: decoding stored status: %w", err)
	}
	return status.FromProto(&p), nil
}
