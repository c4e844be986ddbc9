package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestTour runs the example as `go run ./examples/grpc-payments` does.
func TestTour(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "All 5 steps behaved as expected.") {
		t.Fatal(out.String())
	}
}
