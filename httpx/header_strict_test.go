package httpx

import (
	"errors"
	"testing"

	"github.com/idemkit/idemkit"
)

// TestParseKeyParametersAsRFC8941: an sf-string's parameters follow it with no space before each
// ";" (RFC 8941 4.2.3.2), and their numbers have at most 15 integer digits, or 12 and 1 to 3
// fractional ones (4.2.4). Values outside that grammar are neither an sf-string item nor a bare key,
// and were taken as keys (found by a defect hunt): they are malformed, 400 invalid-key.
func TestParseKeyParametersAsRFC8941(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{`"abc";v=1;w`, true},
		{`"abc"; v=1; w`, true},
		{`"abc"  `, true},
		{`"abc";v=123456789012345`, true},
		{`"abc";v=-123456789012345`, true},
		{`"abc";v=123456789012.123`, true},
		{`"abc" ;v=1`, false},
		{"\"abc\"\t;v=1", false},
		{`"abc";v=1 ;w`, false},
		{`"abc";v=1234567890123456`, false},
		{`"abc";v=1.1234`, false},
		{`"abc";v=1234567890123.1`, false},
		{`"abc" , "def"`, false},
	}
	for _, tt := range tests {
		got, err := ParseKey(tt.in)
		if (err == nil) != tt.ok || tt.ok && got != "abc" {
			t.Errorf("ParseKey(%q) = %q, %v; want ok=%v", tt.in, got, err, tt.ok)
		}
		if err != nil && !errors.Is(err, idemkit.ErrInvalidKey) {
			t.Errorf("ParseKey(%q): %v does not wrap ErrInvalidKey", tt.in, err)
		}
	}
}
