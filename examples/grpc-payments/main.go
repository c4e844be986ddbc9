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
// answer was the documented one. It takes no flags or arguments: -h prints its usage, anything else
// is refused (exit 2).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `Usage: go run ./examples/grpc-payments

Runs a tour of package grpcx: a guarded Payments gRPC service on a loopback port, in a SQLite
file in a temporary directory, and a client whose calls show each documented answer (a replay, a
key reused with another request, a permanent failure replayed). It exits 0 when every answer was
the documented one, 1 otherwise. It takes no flags or arguments.
`

// cli is main with its command line (without the program name) and its output given, returning the
// exit code: 0 after -h or a tour that behaved, 2 for a command line it refuses, 1 otherwise.
func cli(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("grpc-payments", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package printed the error and the usage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\n\n%s", fs.Arg(0), usage)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, stdout); err != nil {
		fmt.Fprintln(stderr, "grpc-payments:", err)
		return 1
	}
	return 0
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
