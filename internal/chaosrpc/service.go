package chaosrpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// Names of the service.
const (
	ServiceName = "idemkit.chaos.Payments"
	// ChargeMethod is the full name of the guarded method.
	ChargeMethod = "/" + ServiceName + "/Charge"
)

// Payments is the server side of the service.
type Payments interface {
	Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error)
}

// ServiceDesc describes the service for grpc.Server.RegisterService, as protoc-gen-go-grpc would.
func ServiceDesc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: ServiceName,
		HandlerType: (*Payments)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "Charge", Handler: chargeHandler}},
		Metadata:    "chaosrpc",
	}
}

func chargeHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(structpb.Struct)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(Payments).Charge(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: ChargeMethod}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return srv.(Payments).Charge(ctx, req.(*structpb.Struct))
	})
}

// Charge calls the Charge method on cc.
func Charge(ctx context.Context, cc grpc.ClientConnInterface, req *structpb.Struct, opts ...grpc.CallOption) (*structpb.Struct, error) {
	out := new(structpb.Struct)
	if err := cc.Invoke(ctx, ChargeMethod, req, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}
