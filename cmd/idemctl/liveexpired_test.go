package main

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idemkit"
)

// TestLiveClaimPastItsExpiryIsNotListedExpired: a PROCESSING claim whose lease is live but whose
// record's expiry has passed (a claim renewed past it by a version before Extend moved the expiry
// with the lease) is in flight to the Guard, and inspect's human output says so; the JSON of inspect
// and list marked it "expired" (counts as absent) all the same (found by a defect hunt).
func TestLiveClaimPastItsExpiryIsNotListedExpired(t *testing.T) {
	f := setup(t, "mysql")
	ctx := context.Background()
	call := idemkit.Call{Scope: scopeA, Key: "k-live-past-expiry"}
	claim, _, err := f.guard.Begin(ctx, call)
	if err != nil || claim == nil {
		t.Fatalf("claim: %v", err)
	}
	rec := claim.Record()
	past := f.clock.Now().UnixMilli() - 1000
	if err := f.db.Exec("UPDATE "+f.table+" SET expires_at = ? WHERE scope = ? AND idem_key = ?", past, rec.Scope, rec.Key).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := f.guard.Do(ctx, call, func(context.Context) ([]byte, error) { return nil, nil }); !errors.Is(err, idemkit.ErrInFlight) {
		t.Fatalf("the Guard on the key: %v, want in flight", err)
	}
	ins := jsonOf[inspectJSON](t, f.want(t, exitOK, nil, []string{"inspect", "--json", call.Scope, call.Key}))
	if ins.Record == nil || ins.Record.Expired || ins.Record.Stuck {
		t.Fatalf("inspect --json: %+v; want a live claim, not expired", ins.Record)
	}
	l := jsonOf[listed](t, f.want(t, exitOK, nil, []string{"list", "--json", "--scope", scopeA}))
	for _, r := range l.Records {
		if r.Key == call.Key && r.Expired {
			t.Fatalf("list --json marks the live claim expired: %+v", r)
		}
	}
}
