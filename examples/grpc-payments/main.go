// Command grpc-payments is a runnable tour of package grpcx: a Payments gRPC service whose Charge
// method is guarded in Tx mode (the debit, the ledger row and the idempotency record commit in one
// SQLite transaction), called over a loopback TCP connection by a client whose interceptor attaches
// one idempotency key per logical call.
//
//	go run ./examples/grpc-payments
//
// It needs nothing but Go: the database is a SQLite file in a temporary directory and the lock is
// in-process. The service needs no generated code: its messages are google.protobuf.Struct and its
// service description is written by hand (service.go). It prints each step and exits 0 when every
// answer was the documented one.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "grpc-payments:", err)
		os.Exit(1)
	}
}

// run builds the server and client and walks through the tour, writing to out.
func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "grpc-payments-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := newServer(ctx, dir+"/payments.db")
	if err != nil {
		return err
	}
	defer srv.close()
	cl, err := newClient(srv.addr)
	if err != nil {
		return err
	}
	defer cl.close()
	return tour(ctx, cl, srv, out)
}
