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
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"-h"}, 0, "Usage: go run ./examples/grpc-payments"},
		{[]string{"--help"}, 0, "Usage: go run ./examples/grpc-payments"},
		{[]string{"-keep"}, 2, "flag provided but not defined: -keep"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			res := cmdtest.Run(t, tc.args...)
			if res.Code != tc.code || !strings.Contains(res.Stderr, tc.stderr) || strings.Contains(res.Stdout, ran) {
				t.Errorf("exit %d, want %d with %q on stderr and no tour; stdout:\n%s\nstderr:\n%s", res.Code, tc.code, tc.stderr, res.Stdout, res.Stderr)
			}
		})
	}
	res := cmdtest.Run(t)
	if res.Code != 0 || !strings.Contains(res.Stdout, "All 5 steps behaved as expected.") {
		t.Errorf("without arguments: exit %d, want 0 and the tour; stdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}
}
