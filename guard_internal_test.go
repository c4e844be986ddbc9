package idemkit

import (
	"context"
	"strings"
	"testing"
	"time"
)

type nopStore struct{}

func (nopStore) Insert(context.Context, *Record) error                 { return nil }
func (nopStore) Get(context.Context, string, string) (*Record, error)  { return nil, ErrNotFound }
func (nopStore) Update(context.Context, *Record, Version) error        { return nil }
func (nopStore) Delete(context.Context, string, string, Version) error { return nil }

func TestJudge(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	live, past := now.Add(time.Minute), now.Add(-time.Second)
	rec := func(st Status, lease time.Time, mod ...func(*Record)) *Record {
		r := &Record{Status: st, Fence: 1, LeaseUntil: lease, ExpiresAt: now.Add(time.Hour), Fingerprint: "fp"}
		for _, m := range mod {
			m(r)
		}
		return r
	}
	expired := func(r *Record) { r.ExpiresAt = now }
	gid := func(r *Record) { r.GID = "g" }
	for _, tc := range []struct {
		name string
		cur  *Record
		fp   string
		mode Mode
		want verdict
	}{
		{"processing, lease live", rec(StatusProcessing, live), "", ModeExecute, verdictInFlight},
		{"processing, lease expired", rec(StatusProcessing, past), "", ModeExecute, verdictTakeover},
		{"processing, lease ends now", rec(StatusProcessing, now), "", ModeExecute, verdictTakeover},
		{"processing with gid, lease expired", rec(StatusProcessing, past, gid), "", ModeExecute, verdictInFlight},
		{"succeeded", rec(StatusSucceeded, past), "", ModeExecute, verdictReplay},
		{"succeeded, same fingerprint", rec(StatusSucceeded, past), "fp", ModeExecute, verdictReplay},
		{"succeeded, other fingerprint", rec(StatusSucceeded, past), "other", ModeExecute, verdictMismatch},
		{"in flight, other fingerprint", rec(StatusProcessing, live), "other", ModeExecute, verdictMismatch},
		{"rejected", rec(StatusRejected, past), "", ModeExecute, verdictReplay},
		{"failed", rec(StatusFailed, past), "", ModeExecute, verdictTakeover},
		{"failed, other fingerprint", rec(StatusFailed, past), "other", ModeExecute, verdictMismatch},
		{"unknown state", rec(Status("WEIRD"), past), "", ModeExecute, verdictTakeover},
		{"expired succeeded", rec(StatusSucceeded, past, expired), "other", ModeExecute, verdictTakeover},
		{"expired processing, lease expired", rec(StatusProcessing, past, expired), "", ModeExecute, verdictTakeover},
		// A claim renewed past its expiry is alive: never taken over while its lease is.
		{"expired processing, lease live", rec(StatusProcessing, live, expired), "", ModeExecute, verdictInFlight},
		// ... and answers another payload as any live claim does (found by a defect hunt).
		{"expired processing, lease live, other fingerprint", rec(StatusProcessing, live, expired), "other", ModeExecute, verdictMismatch},
		// A record tied to an unsettled global transaction outlives its expiry (issue 11, item 10a).
		{"expired processing with gid", rec(StatusProcessing, past, gid, expired), "", ModeExecute, verdictInFlight},
		{"expired processing with gid, other fingerprint", rec(StatusProcessing, past, gid, expired), "other", ModeExecute, verdictMismatch},
		{"expired succeeded with gid", rec(StatusSucceeded, past, gid, expired), "", ModeExecute, verdictTakeover},
		{"mark: succeeded", rec(StatusSucceeded, past), "", ModeMark, verdictDuplicate},
		{"mark: rejected", rec(StatusRejected, past), "", ModeMark, verdictDuplicate},
		{"mark: processing", rec(StatusProcessing, live), "", ModeMark, verdictInFlight},
		{"tx: succeeded", rec(StatusSucceeded, past), "", ModeTx, verdictReplay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := judge(tc.cur, tc.fp, tc.mode, now); got != tc.want {
				t.Fatalf("judge = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestOptionsValidation(t *testing.T) {
	caller := &Options{Lease: time.Second}
	g, err := New(nopStore{}, caller)
	if err != nil {
		t.Fatal(err)
	}
	if caller.LockTTL != 0 || caller.TTL != 0 {
		t.Fatal("New changed the caller's Options")
	}
	if g.opts.LockTTL != time.Second || g.opts.TTL != DefaultTTL || g.opts.CacheTTL != DefaultTTL || g.opts.MaxKeyLen != DefaultMaxKeyLen {
		t.Fatalf("defaults not applied: %+v", g.opts)
	}
	for name, o := range map[string]*Options{
		"negative lease":     {Lease: -time.Second},
		"sub-ms lease":       {Lease: time.Microsecond},
		"ttl below lease":    {Lease: time.Hour, TTL: time.Minute},
		"negative max key":   {MaxKeyLen: -1},
		"bad namespace":      {Namespace: "a\nb"},
		"negative max hold":  {MaxHold: -time.Second},
		"negative finish to": {FinishTimeout: -1},
	} {
		if _, err := New(nopStore{}, o); err == nil || !strings.Contains(err.Error(), "invalid options") {
			t.Errorf("%s: New returned %v, want an invalid options error", name, err)
		}
	}
	if _, err := New(nil, nil); err == nil {
		t.Error("New(nil store) succeeded")
	}
}

// TestInvalidLeaseNamesOnlyLease: LockTTL defaults to Lease, and an invalid Lease was reported twice,
// the second time as "LockTTL must not be negative" — an option the caller never set, sending them
// to look for it (found by a defect hunt). A LockTTL set to an invalid value is still named.
func TestInvalidLeaseNamesOnlyLease(t *testing.T) {
	for _, lease := range []time.Duration{-time.Second, time.Microsecond} {
		_, err := New(nopStore{}, &Options{Lease: lease})
		if err == nil || !strings.Contains(err.Error(), "Lease") {
			t.Fatalf("Lease %s: New returned %v, want an error naming Lease", lease, err)
		}
		if strings.Contains(err.Error(), "LockTTL") {
			t.Errorf("Lease %s: the error names LockTTL, which was not set: %v", lease, err)
		}
	}
	_, err := New(nopStore{}, &Options{Lease: -time.Second, LockTTL: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "LockTTL") {
		t.Errorf("an invalid LockTTL set with an invalid Lease is not named: %v", err)
	}
}
