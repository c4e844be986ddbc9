package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idemkit"
)

func TestCanonicalNumber(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0", "0"}, {"-0", "0"}, {"0.000", "0"}, {"0e10", "0"}, {"-0.0e-5", "0"},
		{"1", "1"}, {"1.0", "1"}, {"1e0", "1"}, {"10e-1", "1"}, {"0.1e1", "1"}, {"1E+0", "1"},
		{"-1.50", "-1.5"}, {"100", "100"}, {"1e2", "100"}, {"1.5e3", "1500"},
		{"123456789012345678901", "123456789012345678901"},   // 21 digits: in full
		{"1e20", "100000000000000000000"}, {"1e21", "1e+21"}, // as JavaScript
		{"1e22", "1e+22"}, {"12e21", "1.2e+22"},
		{"0.5", "0.5"}, {"5e-1", "0.5"}, {"0.000001", "0.000001"}, {"1e-6", "0.000001"},
		{"1e-7", "1e-7"}, {"12.5e-8", "1.25e-7"}, {"-3.14159", "-3.14159"},
		{"12345678901234567890.5", "12345678901234567890.5"}, // exact, no float rounding
		{"9007199254740993", "9007199254740993"},
		{"1e9999999999999999999", "1e9999999999999999999"}, // absurd exponent: kept as written
	}
	for _, tt := range tests {
		if got := string(appendNumber(nil, tt.in)); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestCanonicalJSON(t *testing.T) {
	tests := []struct {
		in    string
		noise []string
		want  string
	}{
		{`{"b":1,"a":2}`, nil, `{"a":2,"b":1}`},
		{` { "a" : [ 1.0 , true , null , "x" ] } `, nil, `{"a":[1,true,null,"x"]}`},
		{`{"s":"\u00e9\n\"\\\u0001<>&"}`, nil, `{"s":"é\n\"\\\u0001<>&"}`},
		{`{"é":1,"z":2,"A":3}`, nil, `{"A":3,"z":2,"é":1}`},
		{`{"nonce":1,"a":{"nonce":2,"b":[{"nonce":3,"c":4}]}}`, []string{"nonce"}, `{"a":{"b":[{"c":4}]}}`},
		{`{"meta":{"sentAt":1,"v":2},"sentAt":3}`, []string{"meta.sentAt"}, `{"meta":{"v":2},"sentAt":3}`},
		{`{"items":[{"ts":1,"sku":"a"},{"ts":2,"sku":"b"}]}`, []string{"items.ts"}, `{"items":[{"sku":"a"},{"sku":"b"}]}`},
		{`[{"a.b":1}]`, []string{"a.b"}, `[{"a.b":1}]`}, // a dotted path never matches a member with a dot
		{`"x"`, nil, `"x"`},
		{`1.10`, nil, `1.1`},
	}
	for _, tt := range tests {
		got, err := CanonicalJSON([]byte(tt.in), tt.noise...)
		if err != nil || string(got) != tt.want {
			t.Errorf("%s %v: %s, %v; want %s", tt.in, tt.noise, got, err, tt.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1} x`, `{"a":1}{}`, `nul`, `01`, `[1,]`} {
		if got, err := CanonicalJSON([]byte(bad)); err == nil {
			t.Errorf("%q accepted: %s", bad, got)
		}
	}
	if _, err := CanonicalJSON([]byte(`{}`), "a..b"); err == nil {
		t.Error("malformed noise path accepted")
	}
}

// TestCanonicalJSONDuplicateMembers is issue 11 item 16: a repeated member name, at any depth and
// however its name is escaped, is refused (ErrDuplicateMember), so {"a":1,"a":2} and {"a":2} can
// never share a fingerprint or a derived key. Names differing only in case or path are distinct.
func TestCanonicalJSONDuplicateMembers(t *testing.T) {
	dups := []struct {
		in, name string
		noise    []string
	}{
		{`{"a":1,"a":2}`, `"a"`, nil},
		{`{"a":1,"\u0061":2}`, `"a"`, nil},        // escaped-equal names
		{`{"\u00e9":1,"é":2}`, `"é"`, nil},        // an escaped non-ASCII name
		{`{"\ud83d\ude00":1,"😀":2}`, `"😀"`, nil},  // a surrogate pair
		{`{"x":{"a":1,"b":2,"a":3}}`, `"a"`, nil}, // nested
		{`[{"a":1},{"b":1,"b":1}]`, `"b"`, nil},   // in an array
		{`{"a":{"b":{"c":[{"d":1,"d":[]}]}}}`, `"d"`, nil},
		{`{"nonce":1,"nonce":2,"a":1}`, `"nonce"`, []string{"nonce"}}, // noise members count
		{`{"meta":{"t":{"x":1,"x":2}}}`, `"x"`, []string{"meta.t"}},   // inside a noise value
		{`{"a":1,"a":1}`, `"a"`, nil},                                 // even with equal values
	}
	for _, tt := range dups {
		got, err := CanonicalJSON([]byte(tt.in), tt.noise...)
		if !errors.Is(err, ErrDuplicateMember) {
			t.Errorf("%s: %s, %v; want ErrDuplicateMember", tt.in, got, err)
			continue
		}
		if !strings.Contains(err.Error(), tt.name) {
			t.Errorf("%s: error %q does not name %s", tt.in, err, tt.name)
		}
		if _, ok := JSONField([]byte(tt.in), "a"); ok {
			t.Errorf("%s: JSONField accepted it", tt.in)
		}
	}
	for _, ok := range []string{`{"a":{"a":1}}`, `[{"a":1},{"a":2}]`, `{"a":1,"A":2}`, `{"a.b":1,"a":{"b":2}}`,
		`{"a":[{"a":{"a":1}}]}`, `{"":1,"\u0000":2}`} {
		if _, err := CanonicalJSON([]byte(ok)); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	// Invalid JSON is reported as such even when it also repeats a name.
	if _, err := CanonicalJSON([]byte(`{"a":1,"a":2} x`)); err == nil || errors.Is(err, ErrDuplicateMember) {
		t.Errorf("invalid JSON with a repeat: %v", err)
	}
}

func TestJSONField(t *testing.T) {
	doc := []byte(`{"a":{"b":[{"c":1.0},{"c":"x","nonce":9}]},"n":null,"t":false}`)
	tests := []struct {
		path string
		want string
		ok   bool
	}{
		{"a.b.0.c", "1", true}, {"a.b.1.c", "x", true}, {"a.b.1", `{"c":"x"}`, true}, {"t", "false", true},
		{"n", "", false}, {"a.x", "", false}, {"a.b.2", "", false}, {"a.b.-1", "", false}, {"a.b.01", "", false},
		{"a.b.c", "", false}, {"t.x", "", false},
	}
	for _, tt := range tests {
		got, ok := JSONField(doc, tt.path, "nonce")
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: %q %v, want %q %v", tt.path, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzCanonicalJSON checks the direct canonicalizer against decoding with encoding/json and
// writing the tree: same validity, same output; and the output is valid, canonical JSON.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1.0,2e3,-0.5e-9]}`, `[]`, `"\ud800"`, `"\ud83d\ude00\ud800\u0041"`,
		`{"nonce":{"x":1},"y":"\u0000"}`, `123456789012345678901234567890e-5`, `{"a":{"a":{"a":[[[]]]}}}`, `true`,
		`{"":""}`, "{\"\xff\":1}", `{"a":1,"b":2,"a":3}`, `{"a":{"\u0062":1,"b":2}}`, `[{"a":1},{"a":2}]`, `{"a":{"b":1},"a":2}`, `{"a":[{"b":1}],"c":{"d":[]},"a":0}`, `{"a":{"b":1,"c":{"b":2}},"a.b":3}`, ` [ 1 , "x" ] `,
		`{"a":1}x`, `-01`, `1.`, `"\x"`, "\"\t\"", `{"qty":1,"QTY":3,"Qty":2}`, `{"\u212a":1,"k":2,"K":3}`} {
		f.Add([]byte(s))
	}
	noise := []string{"nonce", "a.b", "a.c.b"}
	ns, _ := newNoiseSet(noise)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := CanonicalJSON(data, noise...)
		tree, valid := decodeJSON(data)
		dup := errors.Is(err, ErrDuplicateMember)
		if (err == nil || dup) != valid {
			t.Fatalf("validity: canonicalizer %v, encoding/json %v", err, valid)
		}
		if valid && dup != hasDuplicateMember(t, data) {
			t.Fatalf("repeated member: canonicalizer %v, token scan %v", err, !dup)
		}
		if err != nil {
			return
		}
		// Names that differ only in case keep their document order (the tree, a map, lost it).
		if want := appendCanonical(nil, tree, ns, ""); string(c) != string(want) && !hasCaseVariants(t, data) {
			t.Fatalf("canonicalizer %s, tree %s", c, want)
		}
		if !json.Valid(c) {
			t.Fatalf("canonical form is not JSON: %s", c)
		}
		again, err := CanonicalJSON(c, noise...)
		if err != nil || string(again) != string(c) {
			t.Fatalf("not idempotent: %s → %s (%v)", c, again, err)
		}
	})
}

// hasDuplicateMember reports whether the valid JSON document data names a member twice in one
// object, found independently of the canonicalizer: with encoding/json's token stream.
func hasDuplicateMember(t *testing.T, data []byte) bool {
	return hasMembers(t, data, func(a, b string) bool { return a == b })
}

// hasCaseVariants reports whether an object of the valid JSON document data has two member names
// that differ but are equal under case folding.
func hasCaseVariants(t *testing.T, data []byte) bool {
	return hasMembers(t, data, func(a, b string) bool { return a != b && strings.EqualFold(a, b) })
}

// hasMembers reports whether an object of the valid JSON document data has two member names for
// which same holds, with encoding/json's token stream.
func hasMembers(t *testing.T, data []byte, same func(a, b string) bool) bool {
	type frame struct {
		names  []string // nil for an array
		object bool
		wanted bool // an object expects a name next
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // 1e1000 is valid JSON, not a float64
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			t.Fatalf("token scan of valid JSON: %v", err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.wanted {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].object {
					stack[len(stack)-1].wanted = true // the object was a member's value
				}
				continue
			}
			name := tok.(string)
			for _, n := range top.names {
				if same(n, name) {
					return true
				}
			}
			top.names, top.wanted = append(top.names, name), false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, wanted: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing object wants a name next.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].wanted = true
		}
	}
}

// FuzzCanonicalNumber checks the canonical form of a number has exactly its value.
func FuzzCanonicalNumber(f *testing.F) {
	for _, s := range []string{"0", "-0.0", "1.50e3", "1e-7", "123456789012345678901", "0.000001", "9e21", "1e22"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var n json.Number
		if json.Unmarshal([]byte(s), &n) != nil || strings.ContainsAny(s, " \t\r\n\"") {
			return
		}
		if _, exp, _ := strings.Cut(strings.ToLower(s), "e"); len(exp) > 4 {
			return // big.Rat would build a huge number
		}
		c := string(appendNumber(nil, s))
		want, ok1 := new(big.Rat).SetString(s)
		got, ok2 := new(big.Rat).SetString(c)
		if !ok1 || !ok2 || want.Cmp(got) != 0 {
			t.Fatalf("%s → %s changes the value", s, c)
		}
		if again := string(appendNumber(nil, c)); again != c {
			t.Fatalf("not idempotent: %s → %s → %s", s, c, again)
		}
	})
}

func FuzzJSONField(f *testing.F) {
	f.Add([]byte(`{"a":{"b":[{"c":1}]}}`), "a.b.0.c")
	f.Add([]byte(`{"a":[1,2]}`), "a.1")
	f.Add([]byte(`{"a":{"nonce":1,"x":[]}}`), "a")
	f.Add([]byte(`[]`), "0")
	f.Add([]byte(`{"o":{"b":"\u00e9","a":[1.0,{"nonce":2,"z":null}]}}`), "o")
	f.Add([]byte(`{"o":{"qty":1,"QTY":3}}`), "o")
	f.Fuzz(func(t *testing.T, data []byte, path string) {
		if path == "" || strings.HasPrefix(path, ".") || strings.HasSuffix(path, ".") || strings.Contains(path, "..") {
			return
		}
		v, ok := JSONField(data, path, "nonce")
		if !ok {
			return
		}
		k := idemkit.DerivedKey(v)
		if k == "" || len(k) > 128 || !printable(k) {
			t.Fatalf("derived key %q from %q", k, v)
		}
		// Key stability: without case-variant names, an object or array renders as the decoded
		// tree renders it (the rendering before it came from the canonical form).
		doc, _ := decodeJSON(data)
		tv, where, _, _ := lookupJSON(doc, path)
		switch tv.(type) {
		case map[string]any, []any:
			ns, _ := newNoiseSet([]string{"nonce"})
			if old := string(appendCanonical(nil, tv, ns, where)); old != v && !hasCaseVariants(t, data) {
				t.Fatalf("key text %s, tree rendering %s", v, old)
			}
		}
	})
}

// TestJSONFieldObjectCaseVariants: an object-valued key field renders as its canonical form, which
// keeps the document order of member names that differ only in case: the two orders of such an
// object, which encoding/json decodes differently, give two keys (found by a review: the tree
// rendering gave them one, and with NoFingerprint the second got the first's replay).
func TestJSONFieldObjectCaseVariants(t *testing.T) {
	k1, _ := JSONField([]byte(`{"o":{"qty":1,"QTY":3}}`), "o")
	k2, _ := JSONField([]byte(`{"o":{"QTY":3,"qty":1}}`), "o")
	c1, _ := CanonicalJSON([]byte(`{"qty":1,"QTY":3}`))
	c2, _ := CanonicalJSON([]byte(`{"QTY":3,"qty":1}`))
	if k1 != string(c1) || k2 != string(c2) || k1 == k2 {
		t.Errorf("JSONField %s | %s; CanonicalJSON %s | %s", k1, k2, c1, c2)
	}
	runs := 0
	h := Middleware(memoryGuard(t, nil), &Options{Key: JSONFields("order"), NoFingerprint: true})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++; w.WriteHeader(http.StatusCreated) }))
	serve(h, req("POST", "/orders", "", `{"order":{"sku":"x","qty":1,"QTY":3}}`))
	rec := serve(h, req("POST", "/orders", "", `{"order":{"sku":"x","QTY":3,"qty":1}}`))
	if runs != 2 {
		t.Errorf("the second order (qty 1 for encoding/json) answered %d without running the handler (runs=%d)", rec.Code, runs)
	}
}

// TestCanonicalJSONCaseVariantNames: members whose names differ only in case ("qty" and "QTY") decode
// differently in their two orders (encoding/json folds names and keeps the last): the orders get
// different canonical forms, small objects and large; an object without such names keeps its sorted
// form (found by a defect hunt: both orders shared one fingerprint).
func TestCanonicalJSONCaseVariantNames(t *testing.T) {
	pad := ""
	for i := range 40 {
		pad += fmt.Sprintf(`,"f%02d":%d`, i, i)
	}
	for _, extra := range []string{"", pad} {
		a, err := CanonicalJSON([]byte(`{"sku":"x","qty":1,"QTY":3` + extra + `}`))
		if err != nil {
			t.Fatal(err)
		}
		b, err := CanonicalJSON([]byte(`{"sku":"x","QTY":3,"qty":1` + extra + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if string(a) == string(b) {
			t.Errorf("both orders of qty/QTY (%d extra bytes) canonicalise to %s", len(extra), a)
		}
		c, _ := CanonicalJSON([]byte(`{"sku":"x","Kelvin":1,"\u212aelvin":2` + extra + `}`)) // K and the Kelvin sign fold together
		d, _ := CanonicalJSON([]byte(`{"sku":"x","\u212aelvin":2,"Kelvin":1` + extra + `}`))
		if string(c) == string(d) {
			t.Errorf("both orders of Kelvin/\\u212aelvin (%d extra bytes) canonicalise to %s", len(extra), c)
		}
	}
	if got, _ := CanonicalJSON([]byte(`{"b":1,"A":2,"a":{"Z":1,"y":2}}`)); string(got) != `{"A":2,"a":{"Z":1,"y":2},"b":1}` {
		t.Errorf("no case variants: %s, want the plain sorted form", got)
	}
}
