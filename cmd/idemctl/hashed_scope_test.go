package main

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
)

// TestScopeFilterTakesTheHashedScopeListingsShow: a scope over 128 bytes is stored hashed, and
// stats and list show it as "sha256:…". inspect/release/purge SCOPE KEY accepted that form, but the
// --scope filter of list, stats and purge refused it as an unknown scope (exit 3) while its own error
// listed the very same string among the known scopes (found by a defect hunt).
func TestScopeFilterTakesTheHashedScopeListingsShow(t *testing.T) {
	f := setup(t, "sqlite")
	f.env["IDEMCTL_NAMESPACE"] = ""
	g := f.newGuard(t, "")
	ctx := context.Background()
	long := "POST /" + strings.Repeat("s", 150)
	if _, err := g.Do(ctx, idemkit.Call{Scope: long, Key: "k1"}, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	hashed := idemkit.HashedForm(long)
	// What the listings show.
	f.want(t, exitOK, nil, []string{"stats"}, hashed)
	// inspect takes the hashed scope as shown.
	f.want(t, exitOK, nil, []string{"inspect", hashed, "k1"}, "SUCCEEDED")
	// And so does the --scope filter.
	r := f.idemctl(t, nil, "list", "--scope", hashed)
	if r.code != exitOK || !strings.Contains(r.stdout, "k1") {
		t.Errorf("idemctl list --scope %s (the scope stats shows): %s\nwant exit 0 listing k1", hashed, r)
	}
	r = f.idemctl(t, nil, "purge", "--yes", "--scope", hashed)
	if r.code != exitOK || !strings.Contains(r.stdout, "deleted 1") {
		t.Errorf("idemctl purge --yes --scope %s: %s\nwant exit 0, deleted 1", hashed, r)
	}
}
