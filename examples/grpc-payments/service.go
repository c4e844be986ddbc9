package main

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// The Payments service, described by hand as protoc-gen-go-grpc would: requests and responses are
// google.protobuf.Struct, so no .proto file or generated code is needed.
const (
	serviceName  = "example.payments.Payments"
	chargeMethod = "/" + serviceName + "/Charge"
)

type paymentsServer interface {
	Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error)
}

func serviceDesc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: serviceName,
		HandlerType: (*paymentsServer)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Charge",
			Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := new(structpb.Struct)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, req any) (any, error) {
					return srv.(paymentsServer).Charge(ctx, req.(*structpb.Struct))
				}
				if icpt == nil {
					return h(ctx, in)
				}
				return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: chargeMethod}, h)
			},
		}},
	}
}

// charge calls Charge on cc.
func charge(ctx context.Context, cc grpc.ClientConnInterface, req *structpb.Struct, opts ...grpc.CallOption) (*structpb.Struct, error) {
	out := new(structpb.Struct)
	if err := cc.Invoke(ctx, chargeMethod, req, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}
