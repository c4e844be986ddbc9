package main

import (
	"strings"
	"testing"

	"github.com/idemkit/idemkit/examples/internal/cmdtest"
)

func TestMain(m *testing.M) { cmdtest.Main(m, main) }

// TestCommandLine: the example ran whatever arguments followed its flags (`nats-consumer extra`), and
// took values of its flags that cannot work: -workers 0 ran one worker, -redis localhost (no port)
// ran without a lock, every message logging a dial error, and -n 0 or -workers -1 were refused only
// after parsing, with exit 1, as if the run had failed. Each is refused now with exit 2, before
// anything connects; -h prints the usage and exits 0.
func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"-h"}, 0, "Usage: go run ./examples/nats-consumer [flags]"},
		{[]string{"-no-such-flag"}, 2, "flag provided but not defined: -no-such-flag"},
		{[]string{"-n", "5", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-n", "0"}, 2, "-n 0: "},
		{[]string{"-workers", "0"}, 2, "-workers 0: "},
		{[]string{"-workers", "-1"}, 2, "-workers -1: "},
		{[]string{"-n", "5", "-redis", "localhost"}, 2, `-redis "localhost": `},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			res := cmdtest.Run(t, tc.args...)
			if res.Code != tc.code || !strings.Contains(res.Stderr, tc.stderr) || res.Stdout != "" {
				t.Errorf("exit %d, want %d with %q on stderr and nothing run; stdout:\n%s\nstderr:\n%s", res.Code, tc.code, tc.stderr, res.Stdout, res.Stderr)
			}
		})
	}
}
