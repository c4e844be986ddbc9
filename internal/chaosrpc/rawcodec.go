package chaosrpc

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idemkit/grpcx"
)

// rawCodec is a per-call client codec that keeps the response's bytes as they came off the wire.
type rawCodec struct {
	grpcx.Codec
	raw []byte
}

// Unmarshal keeps a copy of data and decodes it into v.
func (c *rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.raw = data.Materialize()
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("chaosrpc: %T is not a proto message", v)
	}
	return proto.Unmarshal(c.raw, m)
}
