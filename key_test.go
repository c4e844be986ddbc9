package idemkit

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  string
		ok   bool
	}{
		{"ascii", "order-123_ABC.x:y/z", true},
		{"unicode", "клиент-日本-🙂", true},
		{"max length", strings.Repeat("k", 255), true},
		{"empty", "", false},
		{"too long", strings.Repeat("k", 256), false},
		{"invalid utf-8", "ab\xc3", false},
		{"lone continuation byte", "\x80", false},
		{"newline", "a\nb", false},
		{"tab", "a\tb", false},
		{"nul", "\x00", false},
		{"del", "a\x7f", false},
		{"c1 control", "a\u0085b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateKey(tc.key, DefaultMaxKeyLen)
			if tc.ok != (err == nil) {
				t.Fatalf("ValidateKey(%q) = %v, want ok=%v", tc.key, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("error %v does not match ErrInvalidKey", err)
			}
			if err != nil && tc.key != "" && strings.Contains(err.Error(), tc.key) {
				t.Fatalf("error %q echoes the key", err)
			}
		})
	}
}

func TestStoredForm(t *testing.T) {
	short := strings.Repeat("a", MaxStoredLen)
	if StoredForm(short) != short {
		t.Fatal("a key of MaxStoredLen bytes must be stored as is")
	}
	long := short + "b"
	h := StoredForm(long)
	if !strings.HasPrefix(h, hashedPrefix) || len(h) > MaxStoredLen || h != StoredForm(long) {
		t.Fatalf("StoredForm(long) = %q", h)
	}
	if StoredForm(short+"c") == h {
		t.Fatal("different long keys hashed alike")
	}
}

func TestIdentityIsUnambiguous(t *testing.T) {
	g, err := New(nopStore{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := g.identify(&Call{Scope: "a:b", Key: "c"})
	b, _ := g.identify(&Call{Scope: "a", Key: "b:c"})
	if a.lockKey == b.lockKey {
		t.Fatalf("lock keys collide: %q", a.lockKey)
	}
	ns, _ := New(nopStore{}, &Options{Namespace: "billing"})
	c, _ := ns.identify(&Call{Scope: "a", Key: "k"})
	if c.scope != "billing/a" {
		t.Fatalf("namespaced scope %q", c.scope)
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"", "k", "a\nb", "\xff", strings.Repeat("x", 300), "🙂"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateKey(s, DefaultMaxKeyLen)
		if err == nil {
			if s == "" || len(s) > DefaultMaxKeyLen || !utf8Valid(s) {
				t.Fatalf("accepted %q", s)
			}
			if sf := StoredForm(s); len(sf) > MaxStoredLen {
				t.Fatalf("stored form of %q is %d bytes", s, len(sf))
			}
		}
	})
}

// TestLiteralKeyNeverEqualsHashedForm: a key written as "sha256:<64 hex>" is not the hashed form of the
// long key whose hash it spells (issue 11, item 7), for Call keys, scopes and derived keys alike.
func TestLiteralKeyNeverEqualsHashedForm(t *testing.T) {
	long := strings.Repeat("order-", 40) // 240 bytes: stored hashed
	spelled := HashedForm(long)
	if StoredForm(long) != spelled {
		t.Fatal("the long key is not stored as its hashed form")
	}
	if StoredForm(spelled) == spelled || DerivedKey(spelled) == spelled {
		t.Fatalf("the literal %q is stored as is: it would share the long key's record", spelled)
	}
	g, err := New(nopStore{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := g.identify(&Call{Scope: "s", Key: long})
	b, _ := g.identify(&Call{Scope: "s", Key: spelled})
	if a.key == b.key || a.lockKey == b.lockKey {
		t.Fatalf("literal and long key share %q", a.key)
	}
	c, _ := g.identify(&Call{Scope: long, Key: "k"})
	d, _ := g.identify(&Call{Scope: spelled, Key: "k"})
	if c.scope == d.scope {
		t.Fatalf("literal and long scope share %q", c.scope)
	}
}

// TestNamespaceWithSlashRefused: namespace "a/b" with scope "c" would be stored like namespace "a"
// with scope "b/c" (issue 11, item 6).
func TestNamespaceWithSlashRefused(t *testing.T) {
	if _, err := New(nopStore{}, &Options{Namespace: "a/b"}); err == nil || !strings.Contains(err.Error(), "'/'") {
		t.Fatalf("namespace a/b: %v, want a clear error", err)
	}
	g1, err := New(nopStore{}, &Options{Namespace: "a"})
	if err != nil {
		t.Fatal(err)
	}
	g2, err := New(nopStore{}, &Options{Namespace: "a-b"})
	if err != nil {
		t.Fatal(err)
	}
	x, _ := g1.identify(&Call{Scope: "b/c", Key: "k"})
	y, _ := g2.identify(&Call{Scope: "c", Key: "k"})
	if x.scope == y.scope || x.lockKey == y.lockKey {
		t.Fatalf("two namespaces share %q", x.scope)
	}
}
