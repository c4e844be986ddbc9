package grpcx_test

import (
	"os"
	"testing"

	"github.com/idemkit/idemkit/internal/chaosrpc"
)

func TestMain(m *testing.M) {
	chaosrpc.RunServerIfRequested() // the kill -9 test re-executes this binary as a server process
	os.Exit(m.Run())
}
