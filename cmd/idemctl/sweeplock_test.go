package main

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
)

// TestSweepWithoutRedisSaysTheLocksStay: a sweep pass without --redis recovers stuck claims but
// cannot delete the locks their dead holders may still hold (a LockTTL longer than the Lease): their
// retries are answered in flight until the locks expire, and once recovered the records name no
// owner, so nothing can delete them later. release says so; sweep said nothing (found by a defect
// hunt).
func TestSweepWithoutRedisSaysTheLocksStay(t *testing.T) {
	f := setup(t, "mysql")
	ctx := context.Background()
	if cl, _, err := f.guard.Begin(ctx, idemkit.Call{Scope: scopeA, Key: "k-swept-nolock"}); err != nil || cl == nil {
		t.Fatalf("Begin: %v", err)
	}
	f.clock.Advance(2 * testLease)
	f.env["IDEMCTL_NAMESPACE"] = "" // a sweep works on the whole table
	f.env["IDEMCTL_REDIS"] = ""
	r := f.want(t, exitOK, strings.NewReader("y\n"), []string{"sweep"}, "recovered 1 stuck claim(s)")
	if !strings.Contains(r.stderr, "ithout --redis the locks") || !strings.Contains(r.stdout, "without --redis the locks") {
		t.Fatalf("sweep without --redis: %s\nwant the question and the report to say the holders' locks stay", r)
	}
}
