package main

import (
	"strings"
	"testing"
)

// TestReleaseWithoutRedisWarnsTheLockStays: release without --redis — e.g. --force during the lease —
// cannot delete the holder's Redis lock, and once the record is FAILED with no owner nothing in
// idemctl can (release refuses a FAILED record, purge leaves locks alone): inspect then said "held by
// another attempt" and every retry answered in flight until the lock expired. The question, asked
// while the operator can still answer no and give --redis, and the report say the lock stays; with
// --redis neither does.
func TestReleaseWithoutRedisWarnsTheLockStays(t *testing.T) {
	f := setup(t, "mysql")
	s := f.populate(t)
	withRedis := f.env["IDEMCTL_REDIS"]
	f.env["IDEMCTL_REDIS"] = ""
	r := f.want(t, exitRefused, strings.NewReader("n\n"), []string{"release", "--force", scopeA, s.live}, "not confirmed")
	if !strings.Contains(r.stderr, "Without --redis the holder's lock") {
		t.Errorf("release's question without --redis: %s\nwant it to say the holder's lock stays", r)
	}
	r = f.want(t, exitOK, nil, []string{"release", "--yes", "--force", scopeA, s.live}, "released")
	if !strings.Contains(r.stdout, "without --redis the holder's lock") {
		t.Errorf("release's report without --redis: %s\nwant it to say the holder's lock stays", r)
	}
	out := jsonOf[map[string]any](t, f.want(t, exitOK, nil, []string{"release", "--yes", "--json", scopeA, s.stuck}))
	if w, _ := out["warning"].(string); !strings.Contains(w, "without --redis the holder's lock") {
		t.Errorf("release --json without --redis: %v; want a warning that the holder's lock stays", out)
	}

	f.env["IDEMCTL_REDIS"] = withRedis
	g := jsonOf[map[string]any](t, f.want(t, exitOK, nil, []string{"release", "--yes", "--json", "--force", scopeA, s.gidClaim}))
	if g["warning"] != "" {
		t.Errorf("release --json with --redis: %v; want no warning", g)
	}
}
