package httpx

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth is the deepest nesting accepted, as encoding/json.
const maxDepth = 10000

// canonicalizer writes the canonical form of a JSON document straight from its bytes, with the
// same result and the same notion of validity as decoding it with encoding/json (UseNumber) and
// writing the tree with appendCanonical, but without building the tree. It is used by one
// goroutine.
type canonicalizer struct {
	data  []byte
	pos   int
	depth int
	ns    *noiseSet
	keys  []byte                // decoded member names of the objects being written
	spans []member              // members of the objects being written, innermost last
	tmp   []byte                // scratch for reordering an object's members
	dup   *duplicateMemberError // the first repeated member name, if any
	lossy bool                  // a string had an invalid byte or an unpaired surrogate (U+FFFD)
}

// member is an object member: its decoded name in keys, where the name starts in data, and its
// value in dst (empty for a noise member, which is dropped).
type member struct {
	keyOff, keyEnd int
	valOff, valEnd int
	at             int
	noise          bool
}

// errNotJSON: the data is not a single valid JSON value.
var errNotJSON = errors.New("httpx: not a single JSON value")

// canonicalize appends the canonical form of the JSON document data, without the noise fields, to
// dst. It returns errNotJSON (dst unusable) when data is not a single valid JSON value, and an
// error matching [ErrDuplicateMember] when it is valid JSON but an object names a member twice
// (names compared after unescaping, so "a" and "\u0061" are the same name; noise members count):
// encoding/json would keep the last value, so two different documents would share one canonical
// form.
func canonicalize(dst, data []byte, ns *noiseSet) ([]byte, error) {
	dst, _, err := canonicalizeLossy(dst, data, ns)
	return dst, err
}

// canonicalizeLossy is canonicalize also reporting whether decoding replaced anything with U+FFFD
// (an invalid UTF-8 byte, an unpaired surrogate escape): different documents may then share one
// canonical form.
func canonicalizeLossy(dst, data []byte, ns *noiseSet) ([]byte, bool, error) {
	c := canonicalizer{data: data, ns: ns, keys: make([]byte, 0, 64), spans: make([]member, 0, 8)}
	c.ws()
	dst, ok := c.value(dst, "")
	if !ok {
		return nil, false, errNotJSON
	}
	c.ws()
	switch {
	case c.pos != len(c.data):
		return nil, false, errNotJSON
	case c.dup != nil:
		return nil, false, c.dup
	}
	return dst, c.lossy, nil
}

func (c *canonicalizer) ws() {
	for c.pos < len(c.data) {
		switch c.data[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canonicalizer) value(dst []byte, path string) ([]byte, bool) {
	if c.pos >= len(c.data) {
		return dst, false
	}
	switch b := c.data[c.pos]; {
	case b == '{':
		return c.object(dst, path)
	case b == '[':
		return c.array(dst, path)
	case b == '"':
		return c.str(dst)
	case b == 't':
		return c.literal(dst, "true")
	case b == 'f':
		return c.literal(dst, "false")
	case b == 'n':
		return c.literal(dst, "null")
	case b == '-' || b >= '0' && b <= '9':
		return c.number(dst)
	}
	return dst, false
}

func (c *canonicalizer) literal(dst []byte, lit string) ([]byte, bool) {
	if !bytes.HasPrefix(c.data[c.pos:], []byte(lit)) {
		return dst, false
	}
	c.pos += len(lit)
	return append(dst, lit...), true
}

func (c *canonicalizer) number(dst []byte) ([]byte, bool) {
	d, start := c.data, c.pos
	i := start
	if d[i] == '-' {
		i++
	}
	digits := func() bool {
		j := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		return i > j
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case !digits():
		return dst, false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if !digits() {
			return dst, false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if !digits() {
			return dst, false
		}
	}
	c.pos = i
	return appendNumber(dst, string(d[start:i])), true
}

// str appends the JSON string at c.pos in canonical form, decoding it at the end of the keys
// arena first.
func (c *canonicalizer) str(dst []byte) ([]byte, bool) {
	off := len(c.keys)
	var ok bool
	if c.keys, ok = c.unquote(c.keys); !ok {
		return dst, false
	}
	dst = appendString(dst, c.keys[off:])
	c.keys = c.keys[:off]
	return dst, true
}

// unquote appends the decoded text of the JSON string at c.pos to dst, decoding as encoding/json
// does: invalid UTF-8 bytes and unpaired surrogate escapes become U+FFFD.
func (c *canonicalizer) unquote(dst []byte) ([]byte, bool) {
	d := c.data
	i := c.pos + 1
	for i < len(d) {
		b := d[i]
		switch {
		case b == '"':
			c.pos = i + 1
			return dst, true
		case b < 0x20:
			return dst, false
		case b == '\\':
			i++
			if i >= len(d) {
				return dst, false
			}
			switch e := d[i]; e {
			case '"', '\\', '/':
				dst = append(dst, e)
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, ok := hex4(d[i+1:])
				if !ok {
					return dst, false
				}
				i += 4
				if utf16.IsSurrogate(r) {
					if len(d) > i+2 && d[i+1] == '\\' && d[i+2] == 'u' {
						if r2, ok := hex4(d[i+3:]); ok {
							if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
								dst = utf8.AppendRune(dst, dec)
								i += 7
								continue
							}
						}
					}
					r, c.lossy = utf8.RuneError, true
				}
				dst = utf8.AppendRune(dst, r)
			default:
				return dst, false
			}
			i++
		case b < utf8.RuneSelf:
			dst = append(dst, b)
			i++
		default:
			r, n := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && n == 1 {
				c.lossy = true
			}
			dst = utf8.AppendRune(dst, r) // an invalid byte becomes U+FFFD
			i += n
		}
	}
	return dst, false
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

func (c *canonicalizer) array(dst []byte, path string) ([]byte, bool) {
	if c.depth++; c.depth > maxDepth {
		return dst, false
	}
	c.pos++
	dst = append(dst, '[')
	c.ws()
	if c.pos < len(c.data) && c.data[c.pos] == ']' {
		c.pos++
		c.depth--
		return append(dst, ']'), true
	}
	for first := true; ; first = false {
		if !first {
			dst = append(dst, ',')
		}
		c.ws()
		var ok bool
		if dst, ok = c.value(dst, path); !ok { // arrays are transparent to paths
			return dst, false
		}
		c.ws()
		if c.pos >= len(c.data) {
			return dst, false
		}
		switch c.data[c.pos] {
		case ',':
			c.pos++
		case ']':
			c.pos++
			c.depth--
			return append(dst, ']'), true
		default:
			return dst, false
		}
	}
}

func (c *canonicalizer) object(dst []byte, path string) ([]byte, bool) {
	if c.depth++; c.depth > maxDepth {
		return dst, false
	}
	c.pos++
	objStart, spanBase, keyBase := len(dst), len(c.spans), len(c.keys)
	c.ws()
	if c.pos < len(c.data) && c.data[c.pos] == '}' {
		c.pos++
		c.depth--
		return append(dst, '{', '}'), true
	}
	trackPaths := c.ns != nil && len(c.ns.paths) > 0
	for {
		c.ws()
		if c.pos >= len(c.data) || c.data[c.pos] != '"' {
			return dst, false
		}
		keyOff, at := len(c.keys), c.pos
		var ok bool
		if c.keys, ok = c.unquote(c.keys); !ok {
			return dst, false
		}
		key := c.keys[keyOff:]
		c.ws()
		if c.pos >= len(c.data) || c.data[c.pos] != ':' {
			return dst, false
		}
		c.pos++
		c.ws()
		child := ""
		if trackPaths {
			switch {
			case path == unmatchable || bytes.IndexByte(key, '.') >= 0:
				child = unmatchable
			case path == "":
				child = string(key)
			default:
				child = path + "." + string(key)
			}
		}
		valOff := len(dst)
		if dst, ok = c.value(dst, child); !ok {
			return dst, false
		}
		m := member{keyOff: keyOff, keyEnd: len(c.keys), valOff: valOff, valEnd: len(dst), at: at}
		if c.ns != nil && (c.ns.names[string(key)] || child != "" && c.ns.paths[child]) {
			dst = dst[:valOff] // parsed for validity, then dropped; its name still counts for repeats
			m.valEnd, m.noise = valOff, true
		}
		c.spans = append(c.spans, m)
		c.ws()
		if c.pos >= len(c.data) {
			return dst, false
		}
		if c.data[c.pos] == ',' {
			c.pos++
			continue
		}
		if c.data[c.pos] != '}' {
			return dst, false
		}
		c.pos++
		break
	}
	c.depth--

	// Order the members by name, note a repeated name, and write them.
	ms := c.spans[spanBase:]
	slices.SortStableFunc(ms, func(a, b member) int {
		return bytes.Compare(c.keys[a.keyOff:a.keyEnd], c.keys[b.keyOff:b.keyEnd])
	})
	for i := 1; i < len(ms) && c.dup == nil; i++ {
		if name := c.keys[ms[i].keyOff:ms[i].keyEnd]; bytes.Equal(name, c.keys[ms[i-1].keyOff:ms[i-1].keyEnd]) {
			// Stable sort: ms[i] is the later of the two in the document. Parsing goes on, so a
			// document that is not JSON at all is reported as such.
			c.dup = &duplicateMemberError{name: string(name), offset: ms[i].at}
		}
	}
	if len(ms) > 1 {
		c.foldOrder(ms)
	}
	c.tmp = append(c.tmp[:0], dst[objStart:]...) // the values, in source order
	dst = append(dst[:objStart], '{')
	first := true
	for _, m := range ms {
		if m.noise {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendString(dst, c.keys[m.keyOff:m.keyEnd])
		dst = append(dst, ':')
		dst = append(dst, c.tmp[m.valOff-objStart:m.valEnd-objStart]...)
	}
	c.spans, c.keys = c.spans[:spanBase], c.keys[:keyBase]
	return append(dst, '}'), true
}

// foldOrder reorders ms, sorted by name, when names in it differ but are equal under Unicode case
// folding ("qty" and "QTY"): encoding/json matches struct fields so, keeping the last of them, and the
// two orders of such members decode differently. Each such group is written where its first member
// sorts, in document order, so those orders get different canonical forms. Objects without such
// names (nearly all) keep the plain sorted order, and their canonical form is unchanged.
func (c *canonicalizer) foldOrder(ms []member) {
	name := func(m member) []byte { return c.keys[m.keyOff:m.keyEnd] }
	// Only a name with an upper-case ASCII letter or a non-ASCII byte can fold with another.
	if !slices.ContainsFunc(ms, func(m member) bool {
		return slices.ContainsFunc(name(m), func(b byte) bool { return b >= 'A' && b <= 'Z' || b >= utf8.RuneSelf })
	}) {
		return
	}
	var group []int // 1 + the index of the first member of i's group, 0 when alone
	found := false
	if len(ms) <= 32 {
		for i := range ms {
			for j := i + 1; j < len(ms); j++ {
				if !ms[i].noise && !ms[j].noise && (group == nil || group[j] == 0) && !bytes.Equal(name(ms[i]), name(ms[j])) && bytes.EqualFold(name(ms[i]), name(ms[j])) {
					if group == nil {
						group = make([]int, len(ms))
					}
					if group[i] == 0 {
						group[i] = i + 1
					}
					group[j], found = group[i], true
				}
			}
		}
	} else {
		group = make([]int, len(ms))
		first := make(map[string]int, len(ms))
		for i, m := range ms {
			if m.noise {
				continue // dropped: it must not move the members it folds with
			}
			k := foldKey(name(m))
			if f, ok := first[k]; ok && !bytes.Equal(name(ms[f]), name(m)) {
				group[f], group[i], found = f+1, f+1, true
			} else if !ok {
				first[k] = i
			}
		}
	}
	if !found {
		return
	}
	out := make([]member, 0, len(ms))
	for i, m := range ms {
		switch {
		case group[i] == 0:
			out = append(out, m)
		case group[i] == i+1: // the group's first member: the whole group, in document order
			start := len(out)
			for j := i; j < len(ms); j++ {
				if group[j] == i+1 {
					out = append(out, ms[j])
				}
			}
			slices.SortFunc(out[start:], func(a, b member) int { return a.at - b.at })
		}
	}
	copy(ms, out)
}

// foldKey maps name to one representative of its case-folding class: each rune becomes the smallest
// rune of its unicode.SimpleFold orbit, so foldKey(a) == foldKey(b) exactly when bytes.EqualFold(a, b).
func foldKey(name []byte) string {
	var b strings.Builder
	b.Grow(len(name))
	for _, r := range string(name) {
		low := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			low = min(low, f)
		}
		b.WriteRune(low)
	}
	return b.String()
}
