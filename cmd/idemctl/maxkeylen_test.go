package main

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// TestLongKeyNamesMaxKeyLen: an application with a MaxKeyLen above the default 255 stores keys
// idemctl, left at its default --max-key-len, refused as "invalid idempotency key: 300 bytes, longer
// than 255" — a key the application accepted, with nothing saying that idemctl must be told the
// application's MaxKeyLen. The refusal now names --max-key-len; given it, the key is found.
func TestLongKeyNamesMaxKeyLen(t *testing.T) {
	f := setup(t, "sqlite")
	g, err := idemkit.New(f.store, &idemkit.Options{Namespace: testNS, MaxKeyLen: 1024,
		Locker: lock.New(f.rdb, &lock.Options{Prefix: f.prefix}), Lease: testLease, TTL: testTTL, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	key := strings.Repeat("k", 300)
	if _, err := g.Do(context.Background(), idemkit.Call{Scope: scopeA, Key: key}, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	scope := strings.Repeat("s", 300)
	for _, argv := range [][]string{
		{"inspect", scopeA, key},
		{"release", "--yes", scopeA, key},
		{"purge", "--yes", scopeA, key},
		{"list", "--scope", scope},
		{"inspect", scope, "k"},
	} {
		f.want(t, exitUsage, nil, argv, "300 bytes, longer than 255 (--max-key-len)", "IDEMCTL_MAX_KEY_LEN")
	}
	f.want(t, exitOK, nil, []string{"inspect", "--max-key-len", "1024", scopeA, key}, "SUCCEEDED")
	f.env["IDEMCTL_MAX_KEY_LEN"] = "1024"
	f.want(t, exitOK, nil, []string{"inspect", scopeA, key}, "SUCCEEDED")
}
