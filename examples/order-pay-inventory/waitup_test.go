package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestWaitUpInterruptedSaysSo: serve interrupted (SIGINT, SIGTERM) while it waited for a database or
// Redis that did not answer said "Redis … did not answer within 1m0s: context deadline exceeded",
// however soon it was interrupted: the operator read an outage of a minute that never happened. An
// interrupted wait says it was interrupted, with the last error (found by a defect hunt).
func TestWaitUpInterruptedSaysSo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	refused := errors.New("connection refused")
	err := waitUp(ctx, time.Minute, "Redis x:1", func(context.Context) error { return refused })
	if err == nil || strings.Contains(err.Error(), "within 1m0s") || !strings.Contains(err.Error(), "interrupted") || !errors.Is(err, refused) {
		t.Errorf("an interrupted wait returned %v, want it said interrupted, with the last error", err)
	}
	err = waitUp(context.Background(), 100*time.Millisecond, "Redis x:1", func(context.Context) error { return refused })
	if err == nil || !strings.Contains(err.Error(), "did not answer within 100ms") || !errors.Is(err, refused) {
		t.Errorf("a wait that timed out returned %v", err)
	}
}
