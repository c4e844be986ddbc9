package main

import (
	"strings"
	"testing"

	"github.com/idemkit/idemkit/examples/internal/cmdtest"
)

func TestMain(m *testing.M) { cmdtest.Main(m, main) }

// TestCommandLine: the example took no flags and ran its whole tour whatever its command line said,
// -h and misspelt flags included. -h prints the usage and exits 0 without running anything now; an
// unknown flag or an argument is refused with exit 2, before anything runs.
func TestCommandLine(t *testing.T) {
	const ran = "1. charge 30" // the tour's first line
	cmdtest.CommandLine(t, ran, []cmdtest.Case{
		{Args: []string{"-h"}, Code: 0, Stderr: "Usage: go run ./examples/grpc-payments"},
		{Args: []string{"--help"}, Code: 0, Stderr: "Usage: go run ./examples/grpc-payments"},
		{Args: []string{"-keep"}, Code: 2, Stderr: "flag provided but not defined: -keep"},
		{Args: []string{"extra"}, Code: 2, Stderr: `unexpected argument "extra"`},
	})
	res := cmdtest.Run(t)
	if res.Code != 0 || !strings.Contains(res.Stdout, "All 5 steps behaved as expected.") {
		t.Errorf("without arguments: exit %d, want 0 and the tour; stdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
}
