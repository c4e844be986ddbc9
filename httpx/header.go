package httpx

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemkit/idemkit"
)

// ParseKey parses an Idempotency-Key field value. The IETF draft makes the field a Structured Field
// (RFC 8941) Item whose value is a String: `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, possibly
// followed by parameters, which are checked and ignored. For the many clients that send the bare
// value, an unquoted run of visible ASCII without quotes, commas, semicolons or backslashes is
// accepted too.
//
// It returns the key, or an error wrapping idemkit.ErrInvalidKey when the value is empty, malformed,
// or a list.
func ParseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", fmt.Errorf("%w: %w", idemkit.ErrInvalidKey, errKeyEmpty)
	}
	if v[0] != '"' {
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c <= ' ' || c >= 0x7f || c == '"' || c == ',' || c == ';' || c == '\\' {
				return "", fmt.Errorf("%w: unquoted value has %q at byte %d", idemkit.ErrInvalidKey, c, i)
			}
		}
		return v, nil
	}
	key, rest, err := parseSFString(v)
	if err != nil {
		return "", err
	}
	if err := skipSFParams(rest); err != nil {
		return "", err
	}
	if key == "" {
		return "", fmt.Errorf("%w: string %w", idemkit.ErrInvalidKey, errKeyEmpty)
	}
	return key, nil
}

// parseSFString parses an RFC 8941 sf-string at the start of s and returns it unescaped and the
// rest of s.
func parseSFString(s string) (val, rest string, err error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", "", fmt.Errorf("%w: bad escape in string", idemkit.ErrInvalidKey)
			}
			b.WriteByte(s[i])
		case c == '"':
			return b.String(), s[i+1:], nil
		case c < 0x20 || c >= 0x7f:
			return "", "", fmt.Errorf("%w: string has byte %#x", idemkit.ErrInvalidKey, c)
		default:
			b.WriteByte(c)
		}
	}
	return "", "", fmt.Errorf("%w: unterminated string", idemkit.ErrInvalidKey)
}

var errSFParams = fmt.Errorf("%w: malformed parameters", idemkit.ErrInvalidKey)

// skipSFParams checks that s is a (possibly empty) list of RFC 8941 parameters, each right after
// the item or the parameter before it (no space before its ";"), followed by optional whitespace; a
// comma (a list, not an item) is an error.
func skipSFParams(s string) error {
	for s != "" && s[0] == ';' {
		s = strings.TrimLeft(s[1:], " ")
		// key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )
		if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] == '*') {
			return errSFParams
		}
		i := 1
		for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= '0' && s[i] <= '9' || strings.IndexByte("_-.*", s[i]) >= 0) {
			i++
		}
		s = s[i:]
		if s == "" || s[0] != '=' {
			continue // boolean true parameter
		}
		var err error
		if s, err = skipBareItem(s[1:]); err != nil {
			return err
		}
	}
	switch s = strings.TrimLeft(s, " \t"); {
	case s == "":
		return nil
	case s[0] == ',':
		return fmt.Errorf("%w: a list, not a single key", idemkit.ErrInvalidKey)
	}
	return errSFParams
}

// skipBareItem skips an RFC 8941 bare item (string, token, number, byte sequence, boolean).
func skipBareItem(s string) (string, error) {
	if s == "" {
		return "", errSFParams
	}
	switch c := s[0]; {
	case c == '"':
		_, rest, err := parseSFString(s)
		return rest, err
	case c == '?':
		if len(s) < 2 || (s[1] != '0' && s[1] != '1') {
			return "", errSFParams
		}
		return s[2:], nil
	case c == ':':
		end := strings.IndexByte(s[1:], ':')
		if end < 0 {
			return "", errSFParams
		}
		for _, c := range []byte(s[1 : 1+end]) {
			if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
				return "", errSFParams
			}
		}
		return s[end+2:], nil
	case c == '-' || c >= '0' && c <= '9':
		i := 0
		if c == '-' {
			i++
		}
		start, dot := i, -1
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.' && dot < 0) {
			if s[i] == '.' {
				dot = i
			}
			i++
		}
		// An integer has 1 to 15 digits, a decimal 1 to 12 before its point and 1 to 3 after.
		switch {
		case i == start, dot < 0 && i-start > 15:
			return "", errSFParams
		case dot >= 0 && (dot == start || dot-start > 12 || i-dot-1 < 1 || i-dot-1 > 3):
			return "", errSFParams
		}
		return s[i:], nil
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*':
		i := 1
		for i < len(s) && (isTchar(s[i]) || s[i] == ':' || s[i] == '/') {
			i++
		}
		return s[i:], nil
	}
	return "", errSFParams
}

// errMultipleKeys: the key header appears more than once.
var errMultipleKeys = errors.New("header given more than once")

// keyCaseError: a JSONFields key field's path met a member whose name differs from its segment in case
// only, instead of the exact name or beside it (see lookupJSON).
type keyCaseError struct{ path, name string }

func (e *keyCaseError) Error() string {
	return fmt.Sprintf("JSON field %s: the body has a member %s, equal to it but for case", e.path, strconv.Quote(e.name))
}

// errKeyEmpty: the key was given, empty (an empty header, ?key=, {"id":""}): never no key.
var errKeyEmpty = errors.New("given empty")

// errHeaderSyntax: the key header's value is not a Structured Field String (nor a bare value).
var errHeaderSyntax = errors.New("not a Structured Field String")
