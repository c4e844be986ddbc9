package grpcx

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	spb "google.golang.org/genproto/googleapis/rpc/status"
)

// typeURLPrefix is the prefix of the type URLs of stored responses, as anypb.New writes them.
const typeURLPrefix = "type.googleapis.com/"

// deterministic marshals maps in key order, so equal messages encode to equal bytes in one binary.
var deterministic = proto.MarshalOptions{Deterministic: true}

// fingerprint hashes the full method name and the deterministic encoding of the request: the same
// request to the same method always gives the same fingerprint, another request another one.
func fingerprint(method string, req proto.Message) (string, error) {
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
