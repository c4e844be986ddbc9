// Command dtm-msg is a runnable tour of package dtmmsg: guarded DTM 2-phase messages. An order
// service creates orders in a local SQLite transaction and publishes an "order created" message whose
// branch (an inbox service, guarded by the barrier) DTM calls exactly when the order committed. The
// client's idempotency key makes duplicates replay instead of publishing again.
//
//	go run ./examples/dtm-msg
//
// It needs only Go: it builds a DTM server on first use (a few minutes, cached) and runs it as a child
// process, uses SQLite files in a temporary directory and serves the branch and DTM's back-check with
// chi on a loopback port. It exits 0 when every step behaved as documented.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/idemkit/idemkit/internal/dtmserver"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	fmt.Println("Starting a DTM server (built on first use: a few minutes, then cached)...")
	srv, err := dtmserver.Start(ctx, &dtmserver.Options{BuildProgress: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "dtm-msg:", err)
		os.Exit(1)
	}
	defer srv.Stop()
	if err := run(ctx, srv.URL(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "dtm-msg:", err)
		_ = srv.Stop()
		os.Exit(1)
	}
}
