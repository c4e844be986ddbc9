package main

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// TestPurgeSkipsARecentMarkWithoutRedis: without --redis, purge skips a mark (Mark mode writes it
// before its function runs) written less than --lease ago, unless --force; once that has passed it
// deletes it.
func TestPurgeSkipsARecentMarkWithoutRedis(t *testing.T) {
	f := setup(t, "mysql")
	f.env["IDEMCTL_REDIS"] = ""
	ctx := context.Background()
	if err := f.guard.Mark(ctx, idemkit.Call{Scope: "mark", Key: "k"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	f.want(t, exitRefused, nil, []string{"purge", "--yes", "--lease", "1m", "mark", "k"}, "a mark written", "force")
	f.want(t, exitRefused, nil, []string{"purge", "--yes", "--lease", "1m", "--scope", "mark"}, "skipped", "a mark written")
	f.clock.Advance(time.Minute)
	f.want(t, exitOK, nil, []string{"purge", "--yes", "--lease", "1m", "mark", "k"}, "deleted")
}

// TestPurgeJSONSkippedIsAList: purge --json's "skipped" is a list of what was left alone, empty when
// nothing was: it was null then, which a script iterating over it (for s in out["skipped"]) failed on.
func TestPurgeJSONSkippedIsAList(t *testing.T) {
	f := setup(t, "sqlite")
	f.populate(t)
	for _, argv := range [][]string{
		{"purge", "--yes", "--json", "--gid", "nobody"},      // nothing matched
		{"purge", "--yes", "--json", "--status", "REJECTED"}, // one deleted, none skipped
	} {
		out := jsonOf[map[string]any](t, f.want(t, exitOK, nil, argv))
		if _, ok := out["skipped"].([]any); !ok {
			t.Errorf("idemctl %q: skipped is %#v, want a list", argv, out["skipped"])
		}
	}
}
