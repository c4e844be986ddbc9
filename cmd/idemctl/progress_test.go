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
