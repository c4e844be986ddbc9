package grpcx

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Codec is a gRPC codec for protocol buffers that encodes maps in key order (deterministic
// encoding). A server that serves with it (grpc.ForceServerCodecV2(grpcx.Codec{})) sends a replayed
// response byte for byte as it sent the original, maps included; with gRPC's default codec the two
// differ only in the order of map entries (they are always proto.Equal). Its name is "proto", so
// clients need nothing. The zero value is ready to use.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// Marshal encodes v, a proto.Message, deterministically.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("grpcx: cannot marshal %T: not a proto message", v)
	}
	b, err := deterministic.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

// Unmarshal decodes data into v, a proto.Message.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("grpcx: cannot unmarshal into %T: not a proto message", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// Name returns "proto".
func (Codec) Name() string { return "proto" }
