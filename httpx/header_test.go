package httpx

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
)

func TestParseKey(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{`8e03978e-40d5-43e8-bc93-6894a57f9324`, "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{` "abc" `, "abc", true},
		{"\t\"abc\"\t", "abc", true},
		{`"a b"`, "a b", true},
		{`"a\"b"`, `a"b`, true},
		{`"a\\b"`, `a\b`, true},
		{`"abc";v=1`, "abc", true},
		{`"abc"; v=1;w;x=?0;y="s";z=:aGk=:;t=tok/x:y;n=-1.5`, "abc", true},
		{`abc:/+*~!`, "abc:/+*~!", true},
		{``, "", false},
		{`   `, "", false},
		{`""`, "", false},
		{`"abc`, "", false},
		{`"a\b"`, "", false},
		{`"a` + "\x01" + `"`, "", false},
		{`"é"`, "", false},
		{`"abc" x`, "", false},
		{`"abc", "def"`, "", false},
		{`"abc";`, "", false},
		{`"abc";V=1`, "", false},
		{`"abc";v=`, "", false},
		{`"abc";v="x`, "", false},
		{`"abc";v=?2`, "", false},
		{`"abc";v=:!:`, "", false},
		{`"abc";v=1.`, "", false},
		{`a,b`, "", false},
		{`a;b`, "", false},
		{`a"b`, "", false},
		{`a b`, "", false},
		{`a\b`, "", false},
		{"a\x7f", "", false},
		{"é", "", false},
	}
	for _, tt := range tests {
		got, err := ParseKey(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, idemkit.ErrInvalidKey) {
			t.Errorf("ParseKey(%q): %v does not wrap ErrInvalidKey", tt.in, err)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `abc`, `"a\"b";x=1;y`, `"a", "b"`, `"`, `"abc";v=:aGk=:`, `;`, `"x";a=-1.5;b=?1`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err != nil {
			if !errors.Is(err, idemkit.ErrInvalidKey) {
				t.Fatalf("%v does not wrap ErrInvalidKey", err)
			}
			return
		}
		if k == "" {
			t.Fatal("empty key accepted")
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x20 || k[i] >= 0x7f {
				t.Fatalf("key %q has byte %#x", k, k[i])
			}
		}
		// Serialising the key as an sf-string parses back to it.
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
		if again, err := ParseKey(quoted); err != nil || again != k {
			t.Fatalf("%q: round trip through %s gave %q, %v", k, quoted, again, err)
		}
	})
}
