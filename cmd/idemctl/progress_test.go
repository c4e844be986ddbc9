package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestProgressOnlyOnTerminal: progress lines go to a terminal only, and stop clears the line and
// waits for the drawing goroutine.
func TestProgressOnlyOnTerminal(t *testing.T) {
	var off bytes.Buffer
	c := &cli{args: args{stderr: &off}}
	p := c.startProgress("reading")
	p.set(10)
	p.stop()
	if off.Len() != 0 {
		t.Fatalf("progress written to a non-terminal: %q", off.String())
	}
	var on bytes.Buffer
	c = &cli{args: args{stderr: &on, terminal: true}}
	p = c.startProgress("reading")
	p.set(10)
	p.stop()
	p.stop() // twice is harmless
	if !strings.HasSuffix(on.String(), "\r\033[K") {
		t.Fatalf("progress did not clear its line: %q", on.String())
	}
}

// TestRunEntry: run, main's body without the process around it, answers help with exit 0 and an
// unknown command with exit 2.
func TestRunEntry(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"help"}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "Exit codes:") {
		t.Fatalf("help: %d %q", code, errb.String())
	}
	if code := run([]string{"nope"}, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), `unknown command "nope"`) {
		t.Fatalf("unknown command: %d %q", code, errb.String())
	}
}
