package main

import (
	"testing"

	"github.com/idemkit/idemkit/examples/internal/cmdtest"
)

func TestMain(m *testing.M) { cmdtest.Main(m, main) }

// TestCommandLine: the example ran whatever arguments followed its flags (`amqp-consumer extra`), and
// took values of its flags that cannot work: -workers 0 ran one worker, -redis localhost (no port)
// ran without a lock, every message logging a dial error, and -n 0 or -workers -1 were refused only
// after parsing, with exit 1, as if the run had failed; so was a -mysql DSN that does not parse, and
// -redis 127.0.0.1:abc (a port that is none) ran without a lock and exited 0. Each is refused now with
// exit 2, before anything connects; -h prints the usage and exits 0.
func TestCommandLine(t *testing.T) {
	cmdtest.CommandLine(t, "", []cmdtest.Case{
		{Args: []string{"-h"}, Code: 0, Stderr: "Usage: go run ./examples/amqp-consumer [flags]"},
		{Args: []string{"-no-such-flag"}, Code: 2, Stderr: "flag provided but not defined: -no-such-flag"},
		{Args: []string{"-n", "5", "extra"}, Code: 2, Stderr: `unexpected argument "extra"`},
		{Args: []string{"-n", "0"}, Code: 2, Stderr: "-n 0: "},
		{Args: []string{"-workers", "0"}, Code: 2, Stderr: "-workers 0: "},
		{Args: []string{"-workers", "-1"}, Code: 2, Stderr: "-workers -1: "},
		{Args: []string{"-n", "5", "-redis", "localhost"}, Code: 2, Stderr: `-redis "localhost": `},
		// A port that is no port ran the whole example without a lock (the Guard fails open) and
		// exited 0; a DSN go-sql-driver cannot parse exited 1, as a failed run does.
		{Args: []string{"-n", "5", "-redis", "127.0.0.1:abc"}, Code: 2, Stderr: `-redis "127.0.0.1:abc": `},
		{Args: []string{"-n", "5", "-redis", "127.0.0.1:99999"}, Code: 2, Stderr: `-redis "127.0.0.1:99999": `},
		{Args: []string{"-n", "5", "-mysql", "nodsn"}, Code: 2, Stderr: `-mysql: `},
	})
}
