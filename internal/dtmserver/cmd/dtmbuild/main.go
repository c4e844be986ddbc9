// Command dtmbuild builds the DTM server binary that idemkit's tests and example use (or finds it in the
// cache) and prints its path, so a script or CI job can pay for the cold build before the tests run:
//
//	go run ./internal/dtmserver/cmd/dtmbuild
//	export IDEMKIT_DTM_BIN=$(go run ./internal/dtmserver/cmd/dtmbuild)   # optional
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/idemkit/idemkit/internal/dtmserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	bin, err := dtmserver.Build(ctx, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
