package main

import (
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
	cmdtest.CommandLine(t, "", []cmdtest.Case{
		{Args: []string{"-h"}, Code: 0, Stderr: "Usage: go run ./examples/nats-consumer [flags]"},
		{Args: []string{"-no-such-flag"}, Code: 2, Stderr: "flag provided but not defined: -no-such-flag"},
		{Args: []string{"-n", "5", "extra"}, Code: 2, Stderr: `unexpected argument "extra"`},
		{Args: []string{"-n", "0"}, Code: 2, Stderr: "-n 0: "},
		{Args: []string{"-workers", "0"}, Code: 2, Stderr: "-workers 0: "},
		{Args: []string{"-workers", "-1"}, Code: 2, Stderr: "-workers -1: "},
		{Args: []string{"-n", "5", "-redis", "localhost"}, Code: 2, Stderr: `-redis "localhost": `},
	})
}
