package main

import (
	"strings"
	"testing"
)

// TestPurgeWithoutRedisWarnsOnlyOfWhatStays: purge's question without --redis said a cached result
// may still be replayed whatever the record, though only a SUCCEEDED or REJECTED record is ever
// cached: a FAILED record has no cached result, and a claim's key holds its holder's lock, not a
// result. It warns of the cached result only where one can exist, and of the holder's lock for a
// claim.
func TestPurgeWithoutRedisWarnsOnlyOfWhatStays(t *testing.T) {
	f := setup(t, "mysql")
	s := f.populate(t)
	f.env["IDEMCTL_REDIS"] = ""
	const cached, locked = "a cached result may still be replayed", "the holder's lock"
	for _, c := range []struct {
		key                 string
		force               bool
		wantCache, wantLock bool
	}{
		{s.ok, false, true, false},
		{s.rejected, false, true, false},
		{s.failed, false, false, false},
		{s.live, true, false, true},
	} {
		argv := []string{"purge", scopeA, c.key}
		if c.force {
			argv = append(argv, "--force")
		}
		r := f.want(t, exitRefused, strings.NewReader("n\n"), argv, "not confirmed")
		if got := strings.Contains(r.stderr, cached); got != c.wantCache {
			t.Errorf("purge %s without --redis: %s\nwarns of a cached result: %v, want %v", c.key, r, got, c.wantCache)
		}
		if got := strings.Contains(r.stderr, locked); got != c.wantLock {
			t.Errorf("purge %s without --redis: %s\nwarns of the holder's lock: %v, want %v", c.key, r, got, c.wantLock)
		}
	}
}
