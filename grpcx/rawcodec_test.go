package grpcx_test

import (
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idemkit/grpcx"
)

// rawCodec is a per-call client codec that keeps the response's bytes as they came off the wire.
type rawCodec struct {
	grpcx.Codec
	raw []byte
}

func (c *rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.raw = data.Materialize()
	return proto.Unmarshal(c.raw, v.(proto.Message))
}
