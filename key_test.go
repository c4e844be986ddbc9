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
