package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
)

// TestTablesShowKeysUnambiguously: the human tables printed scopes and keys as they are, so keys the
// Guard accepts from clients but a terminal does not show as themselves — a trailing space, a
// no-break or zero-width space, a right-to-left override that reverses the rest of the row — were
// shown like other keys, or reordered the row; an operator copying one got "unknown scope" or acted
// on the wrong record. Such a value is now shown quoted, as idemctl's messages quote it (found by a
// defect hunt).
func TestTablesShowKeysUnambiguously(t *testing.T) {
	f := setup(t, "sqlite")
	ctx := context.Background()
	odd := []string{"a b ", "a\u00a0b", "x\u200by", "\u202eevil", `"q`}
	for _, k := range append([]string{"a b"}, odd...) {
		if _, err := f.guard.Do(ctx, idemkit.Call{Scope: "POST /orders", Key: k}, func(context.Context) ([]byte, error) {
			return []byte("r\u202eesult"), nil
		}); err != nil {
			t.Fatal(k, err)
		}
	}
	out := f.want(t, exitOK, nil, []string{"list"}).stdout
	if strings.ContainsAny(out, "\u00a0\u200b\u202e") {
		t.Errorf("list shows invisible or format characters as they are:\n%s", out)
	}
	for _, k := range odd {
		if !strings.Contains(out, strconv.Quote(k)) {
			t.Errorf("list does not show key %q quoted:\n%s", k, out)
		}
	}
	if !strings.Contains(out, "  a b  ") {
		t.Errorf("list does not show the plain key a b as it is:\n%s", out)
	}
	for _, k := range odd {
		out := f.want(t, exitOK, nil, []string{"inspect", "POST /orders", "--", k}).stdout
		if strings.ContainsAny(out, "\u00a0\u200b\u202e") || !strings.Contains(out, strconv.Quote(k)) {
			t.Errorf("inspect of %q does not show it quoted:\n%s", k, out)
		}
	}
}
