package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/examples/internal/cmdtest"
	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/internal/testsvc"
)

func TestMain(m *testing.M) { cmdtest.Main(m, main) }

// TestCommandLine: the example took no flags and ran its whole tour — a DTM server started, built
// first when none was cached — whatever its command line said, -h and misspelt flags included. -h
// prints the usage and exits 0 without starting anything now; an unknown flag or an argument is
// refused with exit 2, before anything starts. (TestTour runs the tour.)
func TestCommandLine(t *testing.T) {
	const started = "Starting a DTM server" // the first line of a run
	cmdtest.CommandLine(t, started, []cmdtest.Case{
		{Args: []string{"-h"}, Code: 0, Stderr: "Usage: go run ./examples/dtm-msg"},
		{Args: []string{"-help"}, Code: 0, Stderr: "Usage: go run ./examples/dtm-msg"},
		{Args: []string{"-dtm", "http://127.0.0.1:36789/api/dtmsvr"}, Code: 2, Stderr: "flag provided but not defined: -dtm"},
		{Args: []string{"extra"}, Code: 2, Stderr: `unexpected argument "extra"`},
	})
}

// TestInterruptCleansUp: Ctrl-C during the tour killed the program where it stood, leaving its SQLite
// files and the DTM server's store in their temporary directories. It ends the tour now, removes both
// and exits 130, as the order-pay-inventory tour does.
func TestInterruptCleansUp(t *testing.T) {
	if _, err := dtmserver.Build(context.Background(), nil); err != nil {
		testsvc.Unavailable(t, "DTM server", err)
	}
	tmp := t.TempDir()
	res := cmdtest.Interrupt(t, "4. a publisher commits its order", []string{"TMPDIR=" + tmp})
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	if res.Code != 130 || len(names) > 0 || !strings.Contains(res.Stderr, "interrupted") {
		t.Errorf("interrupted: exit %d, want 130 saying so, and left %q in its temporary directory, want nothing; stdout:\n%s\nstderr:\n%s",
			res.Code, names, res.Stdout, res.Stderr)
	}
}
