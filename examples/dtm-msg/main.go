// Command dtm-msg is a runnable tour of package dtmmsg: guarded DTM 2-phase messages. An order
// service creates orders in a local SQLite transaction and publishes an "order created" message whose
// branch (an inbox service, guarded by the barrier) DTM calls exactly when the order committed. The
// client's idempotency key makes duplicates replay instead of publishing again.
//
//	go run ./examples/dtm-msg
//
// It needs only Go: it builds a DTM server on first use (a few minutes, cached) and runs it as a child
// process, uses SQLite files in a temporary directory and serves the branch and DTM's back-check with
// chi on a loopback port. It exits 0 when every step behaved as documented. It takes no flags or
// arguments: -h prints its usage, anything else is refused (exit 2).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemkit/idemkit/internal/dtmserver"
)

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `Usage: go run ./examples/dtm-msg

Runs a tour of package dtmmsg: an order service publishes "order created" as a DTM 2-phase message
with its local transaction, once per client key, and shows each documented case (a duplicate
replayed, a local transaction that fails, a publisher that dies before or after its commit). It
builds a DTM server on first use (a few minutes, then cached; IDEMKIT_DTM_BIN names a ready binary
instead) and runs it as a child process; its data are SQLite files in a temporary directory. It
exits 0 when every step behaved as documented, 1 otherwise, 130 when interrupted (Ctrl-C), having
removed its files and stopped the DTM server. It takes no flags or arguments.
`

// cli is main with its command line (without the program name) and its output given, returning the
// exit code: 0 after -h or a tour that behaved, 2 for a command line it refuses, 1 otherwise.
func cli(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dtm-msg", flag.ContinueOnError)
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
	// Ctrl-C ends the tour: its temporary files and the DTM server go with it.
	interrupted, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(interrupted, 20*time.Minute)
	defer cancel()
	fail := func(err error) int {
		if interrupted.Err() != nil {
			fmt.Fprintln(stderr, "dtm-msg: interrupted")
			return 130
		}
		fmt.Fprintln(stderr, "dtm-msg:", err)
		return 1
	}
	fmt.Fprintln(stdout, "Starting a DTM server (built on first use: a few minutes, then cached)...")
	srv, err := dtmserver.Start(ctx, &dtmserver.Options{BuildProgress: stderr})
	if err != nil {
		return fail(err)
	}
	defer srv.Stop()
	if err := run(ctx, srv.URL(), stdout); err != nil {
		return fail(err)
	}
	return 0
}
