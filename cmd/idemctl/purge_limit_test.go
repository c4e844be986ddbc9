package main

import (
	"strings"
	"testing"
)

// TestBulkPurgeSaysItStoppedAtItsLimit: a purge by filters deletes at most --limit records (100 by
// default). The question said the limit was reached, but with --yes — a scheduled purge of old
// failures, as the README suggests — nothing did: "deleted 100 record(s)", exit 0, and the operator
// took the table for clean while more matched. The report says so (--json: limit_reached).
func TestBulkPurgeSaysItStoppedAtItsLimit(t *testing.T) {
	f := setup(t, "mysql")
	f.populate(t) // scope A holds two SUCCEEDED records (ok, and expired) and one REJECTED
	r := f.want(t, exitOK, nil, []string{"purge", "--yes", "--scope", scopeA, "--status", "SUCCEEDED", "--limit", "1"}, "deleted 1 record(s)")
	if !strings.Contains(r.stdout, "--limit 1 reached") {
		t.Errorf("a purge that stopped at its limit: %s\nwant it to say more may match", r)
	}
	out := jsonOf[map[string]any](t, f.want(t, exitOK, nil, []string{"purge", "--yes", "--json", "--scope", scopeA, "--limit", "1"}))
	if out["deleted"] != float64(1) || out["limit_reached"] != true {
		t.Errorf("purge --json that stopped at its limit: %v; want limit_reached true", out)
	}
	out = jsonOf[map[string]any](t, f.want(t, exitOK, nil, []string{"purge", "--yes", "--json", "--scope", scopeA, "--status", "REJECTED", "--limit", "5"}))
	if out["deleted"] != float64(1) || out["limit_reached"] != false {
		t.Errorf("purge --json below its limit: %v; want limit_reached false", out)
	}
}

// TestSweepSaysItStoppedAtItsLimit: sweep (without --dry-run) deletes and recovers at most --limit
// records each (100 by default); with --yes its report gave the counts with no word that more may be
// left, as a bulk purge's did.
func TestSweepSaysItStoppedAtItsLimit(t *testing.T) {
	f := setup(t, "postgres")
	f.populate(t) // one expired record, one stuck claim
	f.env["IDEMCTL_NAMESPACE"] = ""
	r := f.want(t, exitOK, nil, []string{"sweep", "--yes", "--limit", "1"}, "deleted 1 expired record(s), recovered 1")
	if !strings.Contains(r.stdout, "--limit 1 reached") {
		t.Errorf("a sweep that stopped at its limit: %s\nwant it to say more may be left", r)
	}
	out := jsonOf[map[string]any](t, f.want(t, exitOK, nil, []string{"sweep", "--yes", "--json", "--limit", "1"}))
	if out["deleted"] != float64(0) || out["limit_reached"] != false {
		t.Errorf("sweep --json with nothing left: %v; want limit_reached false", out)
	}
}

// TestBulkPurgeThatJustFillsItsLimitSaysNoMore: a purge by filters whose matches just filled --limit
// said the limit was reached and more may match (--json: limit_reached), as list did: the operator
// ran it again for nothing, or a script looped once more. It reads one record past the limit, as list
// does, and says so only when more match.
func TestBulkPurgeThatJustFillsItsLimitSaysNoMore(t *testing.T) {
	f := setup(t, "mysql")
	s := f.populate(t) // scope A holds one REJECTED record and one FAILED, and one claim carries a gid
	r := f.want(t, exitOK, nil, []string{"purge", "--yes", "--scope", scopeA, "--status", "REJECTED", "--limit", "1"}, "deleted 1 record(s)")
	if strings.Contains(r.stdout, "reached") {
		t.Errorf("a purge whose one match filled --limit 1: %s\nwant no word of the limit", r)
	}
	out := jsonOf[map[string]any](t, f.want(t, exitOK, nil, []string{"purge", "--yes", "--json", "--scope", scopeA, "--status", "FAILED", "--limit", "1"}))
	if out["deleted"] != float64(1) || out["limit_reached"] != false {
		t.Errorf("purge --json whose one match filled --limit 1: %v; want limit_reached false", out)
	}
	// Nothing to delete in a match that just fills the limit: a claim of a global transaction, skipped.
	r = f.want(t, exitRefused, nil, []string{"purge", "--yes", "--gid", s.gid, "--limit", "1"}, "no records to delete (1 matched, 1 skipped)")
	if strings.Contains(r.stdout, "reached") {
		t.Errorf("a purge whose one match filled --limit 1, skipped: %s\nwant no word of the limit", r)
	}
}
