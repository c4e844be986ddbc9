package main

import "testing"

// TestRedisDownLeavesTheTableReadable: list, stats, sweep --dry-run and dtm read and write the table
// only, never Redis. With IDEMCTL_REDIS set for the application (as the README's setup does) and Redis
// down — the incident in which an operator most needs the list of stuck claims — they failed with exit
// 1 ("connecting to Redis") before reading anything. They run now; inspect, release, purge and a sweep
// pass, which read or clear Redis (a sweep deletes the recovered claims' locks), still fail rather than
// act without it.
func TestRedisDownLeavesTheTableReadable(t *testing.T) {
	f := setup(t, "mysql")
	s := f.populate(t)
	f.env["IDEMCTL_REDIS"] = "127.0.0.1:1" // nothing listens there
	before := f.snapshot(t)
	f.want(t, exitOK, nil, []string{"list", "--stuck"}, s.stuck)
	f.want(t, exitOK, nil, []string{"stats"}, scopeA)
	f.want(t, exitOK, nil, []string{"sweep", "--dry-run"}, "would recover", s.stuck)
	f.want(t, exitError, nil, []string{"inspect", scopeA, s.ok}, "Redis")
	f.want(t, exitError, nil, []string{"release", "--yes", scopeA, s.stuck}, "Redis")
	f.want(t, exitError, nil, []string{"purge", "--yes", scopeA, s.ok}, "Redis")
	f.env["IDEMCTL_NAMESPACE"] = "" // a sweep pass works on the whole table
	f.want(t, exitError, nil, []string{"sweep", "--yes"}, "Redis")
	if after := f.snapshot(t); after != before {
		t.Fatalf("changed:\n%s\n---\n%s", before, after)
	}
}
