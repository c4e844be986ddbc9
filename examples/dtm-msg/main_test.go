package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/dtmserver"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestTour runs the example's tour against a DTM server child process.
func TestTour(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if _, err := dtmserver.Build(ctx, nil); err != nil {
		testsvc.Unavailable(t, "DTM server", err)
	}
	srv := dtmserver.StartT(t)
	var out bytes.Buffer
	if err := run(ctx, srv.URL(), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "All 5 steps behaved as expected.") {
		t.Fatal(out.String())
	}
}
