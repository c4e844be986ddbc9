package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpTakesHelp: "Every command takes --help", and help is one of the commands usage lists
// ("help [COMMAND]"), but `idemctl help --help` and `idemctl help help` answered "unknown command"
// with exit 2. Both now print the usage text and exit 0.
func TestHelpTakesHelp(t *testing.T) {
	for _, argv := range [][]string{{"help", "--help"}, {"help", "-h"}, {"help", "help"}, {"--help", "help"}} {
		var out, errb bytes.Buffer
		code := run(argv, &out, &errb)
		if code != exitOK || !strings.Contains(out.String(), "Exit codes:") {
			t.Errorf("idemctl %q: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 0 and the usage text", argv, code, out.String(), errb.String())
		}
	}
}
