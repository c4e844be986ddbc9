package idemkit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// keyRecorder is a memory Locker that remembers the keys it was given.
type keyRecorder struct {
	*memory.Locker
	mu   sync.Mutex
	keys []string
}

func (r *keyRecorder) Acquire(ctx context.Context, key, token string, ttl time.Duration) ([]byte, error) {
	r.mu.Lock()
	r.keys = append(r.keys, key)
	r.mu.Unlock()
	return r.Locker.Acquire(ctx, key, token, ttl)
}

// TestAddress: Guard.Address names the record the Guard writes and the key it locks, namespace and
// hashing applied, and refuses what the Guard refuses.
func TestAddress(t *testing.T) {
	store := memory.NewStore()
	rec := &keyRecorder{Locker: memory.NewLocker(nil)}
	g, err := idemkit.New(store, &idemkit.Options{Namespace: "shop", Locker: rec})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct{ scope, key string }{
		{"POST /orders", "k1"},
		{"POST /orders", strings.Repeat("x", 200)},          // hashed key
		{strings.Repeat("s", 130), "k2"},                    // hashed scope
		{"POST /orders", "sha256:looks-like-a-hashed-form"}, // always hashed
	} {
		ad, err := g.Address(c.scope, c.key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Do(ctx, idemkit.Call{Scope: c.scope, Key: c.key}, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Get(ctx, ad.Scope, ad.Key); err != nil {
			t.Fatalf("Address(%.20q, %.20q) = %+v: the Store has no record there: %v", c.scope, c.key, ad, err)
		}
		if last := rec.keys[len(rec.keys)-1]; last != ad.LockKey || idemkit.LockKey(ad.Scope, ad.Key) != ad.LockKey {
			t.Fatalf("LockKey %q, the Locker got %q", ad.LockKey, last)
		}
	}
	if ad, _ := g.Address("POST /orders", "k1"); ad.Scope != "shop/POST /orders" || ad.Key != "k1" {
		t.Fatalf("Address = %+v", ad)
	}
	for _, bad := range [][2]string{{"", "k"}, {"s", ""}, {"s", "a\x00b"}, {"s", strings.Repeat("k", 256)}} {
		if _, err := g.Address(bad[0], bad[1]); !errors.Is(err, idemkit.ErrInvalidKey) {
			t.Fatalf("Address(%q, %.20q): %v, want ErrInvalidKey", bad[0], bad[1], err)
		}
	}
}

// TestNamespaceLikeAHashedFormIsRefused: a namespace starting with "sha256:" made every stored scope
// start with it, and StoredForm hashes every such value: each scope, however short, was stored as a
// hash, so the records were not under "ns/" where admin and idemctl look for a namespace's records
// (listings, scopes, stats under the namespace found none of them). New refuses such a namespace.
func TestNamespaceLikeAHashedFormIsRefused(t *testing.T) {
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Namespace: "sha256:shop"})
	if err != nil {
		if !strings.Contains(err.Error(), "invalid options") || !strings.Contains(err.Error(), "sha256:") {
			t.Fatalf("New: %v, want an invalid options error naming the prefix", err)
		}
		return
	}
	if ad, _ := g.Address("POST /orders", "k1"); ad.Scope != "sha256:shop/POST /orders" {
		t.Fatalf("Namespace %q accepted, but scope %q is stored as %q, not under the namespace", "sha256:shop", "POST /orders", ad.Scope)
	}
}

// TestNamespaceTooLongForAnyScopeIsRefused: a namespace of 127 or 128 bytes was accepted, but "ns/"
// and any scope exceed MaxStoredLen, so every scope, however short, was stored as a hash — not under
// "ns/", where admin and idemctl look for the namespace's records: the effect New refuses a "sha256:"
// namespace for. New refuses a namespace that leaves no room for a scope of one byte.
func TestNamespaceTooLongForAnyScopeIsRefused(t *testing.T) {
	for _, n := range []int{idemkit.MaxStoredLen - 1, idemkit.MaxStoredLen} {
		ns := strings.Repeat("n", n)
		g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Namespace: ns})
		if err != nil {
			if !strings.Contains(err.Error(), "invalid options") || !strings.Contains(err.Error(), "Namespace") {
				t.Fatalf("New with a %d-byte namespace: %v, want an invalid options error about Namespace", n, err)
			}
			continue
		}
		if ad, _ := g.Address("s", "k1"); ad.Scope != ns+"/s" {
			t.Fatalf("a %d-byte namespace accepted, but scope %q is stored as %q, not under the namespace", n, "s", ad.Scope)
		}
	}
	ns := strings.Repeat("n", idemkit.MaxStoredLen-2) // room for "/" and one byte
	g, err := idemkit.New(memory.NewStore(), &idemkit.Options{Namespace: ns})
	if err != nil {
		t.Fatalf("New with a %d-byte namespace: %v", len(ns), err)
	}
	if ad, _ := g.Address("s", "k1"); ad.Scope != ns+"/s" {
		t.Fatalf("scope stored as %q, want %q", ad.Scope, ns+"/s")
	}
}
