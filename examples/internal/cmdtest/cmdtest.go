// Package cmdtest tests an example's command line as a newcomer meets it: the test binary runs the
// example's own main function in a child process, with the arguments given, and the test reads its
// exit code and output. main runs for real — flag parsing, os.Exit and all — so a flag the example
// ignores shows up as the example running instead of refusing it.
//
// A test file of the example calls [Main] from TestMain and [Run] (or [CommandLine], for a table of
// command lines the example must refuse or answer without running) from a test:
//
//	func TestMain(m *testing.M) { cmdtest.Main(m, main) }
//
//	res := cmdtest.Run(t, "-h")
package cmdtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// envMain, set to "1", makes a test binary run the example's main instead of its tests.
const envMain = "IDEMKIT_EXAMPLE_MAIN"

// Timeout bounds a child run of [Run]: an example that runs its whole tour instead of refusing its
// command line must not hold the test for ever.
const Timeout = 3 * time.Minute

// Main runs main, the example's main function, when the test binary was started by [Run], and the
// tests (m.Run) otherwise. It does not return. Call it from the example's TestMain.
func Main(m *testing.M, main func()) {
	if os.Getenv(envMain) == "1" {
		main()
		os.Exit(0) // main returned: exit 0, as the program would
	}
	os.Exit(m.Run())
}

// Result is what a child run of the example's main did.
type Result struct {
	Code           int // the exit code
	Stdout, Stderr string
}

// Interrupt runs the example's main in a child process like [Run], with env added to its
// environment, sends it SIGINT (Ctrl-C) once a line of its stdout contains after, and returns what it
// did. It fails t when after never appeared.
func Interrupt(t *testing.T, after string, env []string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), envMain+"=1"), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("run %q: %v", args, err)
	}
	var stdout strings.Builder
	sc := bufio.NewScanner(out)
	sent := false
	for sc.Scan() {
		stdout.WriteString(sc.Text() + "\n")
		if !sent && strings.Contains(sc.Text(), after) {
			sent = true
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Errorf("interrupt: %v", err)
			}
		}
	}
	err = cmd.Wait()
	res := Result{Code: cmd.ProcessState.ExitCode(), Stdout: stdout.String(), Stderr: stderr.String()}
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%q did not end within %s\nstdout:\n%s\nstderr:\n%s", args, Timeout, res.Stdout, res.Stderr)
	case !sent:
		t.Fatalf("%q never printed %q (%v)\nstdout:\n%s\nstderr:\n%s", args, after, err, res.Stdout, res.Stderr)
	}
	return res
}

// Run runs the example's main in a child process with args as its command line (os.Args[1:]) and
// returns its exit code and output. It fails t when the child could not be started or did not end
// within [Timeout].
func Run(t *testing.T, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	// The arguments follow the binary's name unchanged: the testing package parses the command line
	// only in m.Run, which the child never reaches.
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), envMain+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%q did not end within %s\nstdout:\n%s\nstderr:\n%s", args, Timeout, res.Stdout, res.Stderr)
	case errors.As(err, &exit):
		res.Code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run %q: %v", args, err)
	}
	return res
}

// Case is a command line and the example's expected answer to it: the exit code, and a part of its
// standard error.
type Case struct {
	Args   []string
	Code   int
	Stderr string
}

// CommandLine runs each case (see [Run]) as a subtest and fails it when the exit code or the standard
// error is not the expected one, or when the example ran anyway: its output holds ran, the first line
// of a run (ran empty: anything on its standard output).
func CommandLine(t *testing.T, ran string, cases []Case) {
	t.Helper()
	for _, tc := range cases {
		t.Run(strings.Join(tc.Args, " "), func(t *testing.T) {
			res := Run(t, tc.Args...)
			didRun := res.Stdout != ""
			if ran != "" {
				didRun = strings.Contains(res.Stdout+res.Stderr, ran)
			}
			if res.Code != tc.Code || !strings.Contains(res.Stderr, tc.Stderr) || didRun {
				t.Errorf("exit %d, want %d with %q on stderr and nothing run; stdout:\n%s\nstderr:\n%s",
					res.Code, tc.Code, tc.Stderr, res.Stdout, res.Stderr)
			}
		})
	}
}
