// Package paydemotest tests the command line the payment consumers share (paydemo.Config.Parse),
// from each example's own main: see CommandLine.
package paydemotest

import (
	"testing"

	"github.com/idemkit/idemkit/examples/internal/cmdtest"
)

// CommandLine runs the command lines a consumer example (example: its directory under examples/) must
// answer without running: -h prints its usage and exits 0; a flag it does not define, an argument
// after its flags, and a value that cannot work exit 2 before anything connects. Those values once
// ran: -workers 0 one worker, -redis without a usable port the whole example without a lock (the
// Guard fails open, and it exited 0), and -n 0, -workers -1 and a -mysql DSN that does not parse were
// refused only after parsing, with exit 1, as a failed run. The example's test binary must call
// cmdtest.Main from its TestMain.
func CommandLine(t *testing.T, example string) {
	t.Helper()
	cmdtest.CommandLine(t, "", []cmdtest.Case{
		{Args: []string{"-h"}, Code: 0, Stderr: "Usage: go run ./examples/" + example + " [flags]"},
		{Args: []string{"-no-such-flag"}, Code: 2, Stderr: "flag provided but not defined: -no-such-flag"},
		{Args: []string{"-n", "5", "extra"}, Code: 2, Stderr: `unexpected argument "extra"`},
		{Args: []string{"-n", "0"}, Code: 2, Stderr: "-n 0: "},
		{Args: []string{"-workers", "0"}, Code: 2, Stderr: "-workers 0: "},
		{Args: []string{"-workers", "-1"}, Code: 2, Stderr: "-workers -1: "},
		{Args: []string{"-n", "5", "-redis", "localhost"}, Code: 2, Stderr: `-redis "localhost": `},
		{Args: []string{"-n", "5", "-redis", "127.0.0.1:abc"}, Code: 2, Stderr: `-redis "127.0.0.1:abc": `},
		{Args: []string{"-n", "5", "-redis", "127.0.0.1:99999"}, Code: 2, Stderr: `-redis "127.0.0.1:99999": `},
		{Args: []string{"-n", "5", "-mysql", "nodsn"}, Code: 2, Stderr: `-mysql: `},
	})
}
