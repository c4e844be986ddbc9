package httpx

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// noiseSet holds the fields ignored by fingerprints and derived keys.
type noiseSet struct {
	names map[string]bool // member names matched at any depth (and query parameter names)
	paths map[string]bool // dotted paths from the root
}

func newNoiseSet(fields []string) (*noiseSet, error) {
	ns := &noiseSet{}
	for _, f := range fields {
		if f == "" || strings.HasPrefix(f, ".") || strings.HasSuffix(f, ".") || strings.Contains(f, "..") || !printable(f) {
			return nil, fmt.Errorf("Noise: %q is not a field name or dotted path", f)
		}
		if strings.Contains(f, ".") {
			if ns.paths == nil {
				ns.paths = make(map[string]bool)
			}
			ns.paths[f] = true
		} else {
			if ns.names == nil {
				ns.names = make(map[string]bool)
			}
			ns.names[f] = true
		}
	}
	return ns, nil
}

func (ns *noiseSet) empty() bool { return ns == nil || len(ns.names)+len(ns.paths) == 0 }

// skip reports whether the member name at path (its dotted path, "" when paths are not tracked) is
// noise.
func (ns *noiseSet) skip(name, path string) bool {
	return ns != nil && (ns.names[name] || path != "" && ns.paths[path])
}

// decodeJSON parses data as exactly one JSON value with numbers kept as json.Number. Duplicate
// object members keep the last value, as encoding/json does for the handler: callers refuse such
// documents first (canonicalize reports them). ok is false when data is not valid JSON.
func decodeJSON(data []byte) (v any, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false // trailing data
	}
	return v, true
}

// CanonicalJSON returns the canonical form of the JSON document data: object members sorted by
// name (members whose names differ only in case, which encoding/json folds together keeping the last,
// stay in document order, where the first of them sorts), no insignificant whitespace, numbers normalised (1, 1.0, 1e0 and 10e-1 are all written 1),
// strings escaped minimally, and the noise fields removed at any depth (see [Options.Noise] for
// names and dotted paths). It returns an error when data is not a single valid JSON value or noise
// is malformed, and one matching [ErrDuplicateMember] when an object repeats a member name.
func CanonicalJSON(data []byte, noise ...string) ([]byte, error) {
	ns, err := newNoiseSet(noise)
	if err != nil {
		return nil, err
	}
	return canonicalize(make([]byte, 0, len(data)), data, ns)
}

// unmatchable is the path of members no dotted noise path can name.
const unmatchable = "\x00"

// appendCanonical appends the canonical form of v, found at the dotted path (tracked only when ns
// has paths), to dst.
func appendCanonical(dst []byte, v any, ns *noiseSet, path string) []byte {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...)
	case bool:
		return strconv.AppendBool(dst, v)
	case json.Number:
		return appendNumber(dst, string(v))
	case string:
		return appendString(dst, v)
	case []any:
		dst = append(dst, '[')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendCanonical(dst, e, ns, path) // arrays are transparent to paths
		}
		return append(dst, ']')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys) // byte order of the UTF-8 names
		dst = append(dst, '{')
		first := true
		for _, k := range keys {
			child := ""
			if ns != nil && len(ns.paths) > 0 {
				switch {
				case path == unmatchable || strings.IndexByte(k, '.') >= 0:
					child = unmatchable // a dotted path cannot name a member with a dot in it
				case path == "":
					child = k
				default:
					child = path + "." + k
				}
			}
			if ns.skip(k, child) {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = appendCanonical(dst, v[k], ns, child)
		}
		return append(dst, '}')
	}
	panic(fmt.Sprintf("httpx: unexpected JSON value %T", v)) // decodeJSON produces only the types above
}

// appendString appends s as a JSON string, escaping only '"', '\\' and control characters. Other
// bytes are copied as they are, so distinct byte strings stay distinct (text decoded from JSON is
// valid UTF-8 already).
func appendString[T string | []byte](dst []byte, s T) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// maxExpDigits bounds the exponents normalised; numbers with larger exponents are kept as written.
const maxExpDigits = 15

// appendNumber appends the canonical form of the JSON number s: the shortest decimal with the same
// value, written like JavaScript's Number#toString (integers up to 21 digits in full, small
// fractions as 0.000ddd, the rest in exponent form) but exact, with no float rounding.
func appendNumber(dst []byte, s string) []byte {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	s = strings.ToLower(s)
	mant, expPart, _ := strings.Cut(s, "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	var exp int64
	if expPart != "" {
		expNeg := expPart[0] == '-'
		expPart = strings.TrimLeft(strings.TrimLeft(expPart, "+-"), "0")
		if len(expPart) > maxExpDigits {
			if neg {
				dst = append(dst, '-')
			}
			return append(dst, s...) // absurd exponent: keep as written
		}
		for i := 0; i < len(expPart); i++ {
			exp = exp*10 + int64(expPart[i]-'0')
		}
		if expNeg {
			exp = -exp
		}
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= int64(len(frac))
	if digits == "" {
		return append(dst, '0') // all zeros, including -0
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	digits = trimmed
	if neg {
		dst = append(dst, '-')
	}
	point := int64(len(digits)) + exp // position of the decimal point from the first digit
	switch {
	case exp >= 0 && point <= 21:
		dst = append(dst, digits...)
		for range exp {
			dst = append(dst, '0')
		}
	case exp < 0 && point > 0 && point <= 21:
		dst = append(dst, digits[:point]...)
		dst = append(dst, '.')
		dst = append(dst, digits[point:]...)
	case point <= 0 && point > -6:
		dst = append(dst, '0', '.')
		for range -point {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if len(digits) > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if point-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, point-1, 10)
	}
	return dst
}

// lookupJSON returns the value at the dotted path in v. Segments name object members; a segment
// of digits indexes an array. ok is false when the path does not exist. where is the value's noise
// path: the member names along the way, array indexes left out.
//
// Member names match exactly, as JSON names do. But a handler decoding the body with encoding/json
// fills a `json:"id"` field from "ID" too (names equal under Unicode case folding), from the last
// of them in the body: so a segment also met by a member that differs from it only in case —
// instead of the exact name, or beside it — is reported as folded (that member's name) with ok
// false: the key the path names and the value the handler reads may differ.
func lookupJSON(v any, path string) (val any, where, folded string, ok bool) {
	var names []string
	for seg := range strings.SplitSeq(path, ".") {
		switch cur := v.(type) {
		case map[string]any:
			for name := range cur {
				if name != seg && strings.EqualFold(name, seg) {
					return nil, "", name, false
				}
			}
			if v, ok = cur[seg]; !ok {
				return nil, "", "", false
			}
			names = append(names, seg)
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(cur) || seg != strconv.Itoa(i) {
				return nil, "", "", false
			}
			v = cur[i]
		default:
			return nil, "", "", false
		}
	}
	return v, strings.Join(names, "."), "", true
}

// keyText renders a JSON value v found at the dotted path (where: its member names only) as key
// material: strings as they are, numbers in canonical form, booleans as true/false, objects and
// arrays as canonical JSON without noise — taken from canon, the document's canonical form, when it
// is given and holds the value (it keeps the document order of member names that differ only in
// case, which v, a map, lost). ok is false for null.
func keyText(v any, ns *noiseSet, where string, canon []byte, path string) (string, bool) {
	switch v := v.(type) {
	case nil:
		return "", false
	case string:
		return v, true
	case json.Number:
		return string(appendNumber(nil, string(v))), true
	case bool:
		return strconv.FormatBool(v), true
	}
	if canon != nil {
		if text, ok := canonicalAt(canon, path); ok {
			return text, true
		}
	}
	if ns != nil && len(ns.paths) == 0 {
		where = ""
	}
	return string(appendCanonical(nil, v, ns, where)), true
}

// canonicalAt returns the text of the value at the dotted path in canon, a canonical form (so the
// text is the value's own canonical form), or false when canon does not hold it (the path runs
// through a noise member).
func canonicalAt(canon []byte, path string) (string, bool) {
	raw := json.RawMessage(canon)
	for seg := range strings.SplitSeq(path, ".") {
		switch {
		case len(raw) > 0 && raw[0] == '{':
			var m map[string]json.RawMessage
			if json.Unmarshal(raw, &m) != nil {
				return "", false
			}
			var ok bool
			if raw, ok = m[seg]; !ok {
				return "", false
			}
		case len(raw) > 0 && raw[0] == '[':
			var a []json.RawMessage
			i, err := strconv.Atoi(seg)
			if json.Unmarshal(raw, &a) != nil || err != nil || i < 0 || i >= len(a) || seg != strconv.Itoa(i) {
				return "", false
			}
			raw = a[i]
		default:
			return "", false
		}
	}
	return string(raw), true
}

// JSONField returns the value at the dotted path of the JSON document data as key material (see
// [JSONFields] for the rendering), with the noise fields removed from objects and arrays. ok is
// false when data is not JSON, repeats a member name in an object (see [ErrDuplicateMember]), or
// the path is missing or null, or meets a member whose name differs from it only in case (see
// [JSONFields]).
func JSONField(data []byte, path string, noise ...string) (string, bool) {
	ns, err := newNoiseSet(noise)
	if err != nil {
		return "", false
	}
	canon, err := canonicalize(nil, data, ns)
	if err != nil {
		return "", false
	}
	doc, ok := decodeJSON(data)
	if !ok {
		return "", false
	}
	v, where, _, ok := lookupJSON(doc, path)
	if !ok {
		return "", false
	}
	return keyText(v, ns, where, canon, path)
}
