// Package grpcx guards gRPC unary methods with an idemkit.Guard.
package grpcx

import (
	_ "google.golang.org/genproto/googleapis/rpc/errdetails"
	_ "google.golang.org/grpc"
	_ "google.golang.org/grpc/status"
	_ "google.golang.org/protobuf/types/known/anypb"
)
