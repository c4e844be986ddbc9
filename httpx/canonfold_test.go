package httpx

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit/idemkit"
)

// encoding/json's own folding (fold.go, Go 1.2x), copied as the oracle.
func jsonFoldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

func jsonFoldName(in []byte) string {
	var out []byte
	for i := 0; i < len(in); {
		if c := in[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(in[i:])
		out = utf8.AppendRune(out, jsonFoldRune(r))
		i += n
	}
	return string(out)
}

var foldAlphabet = []string{"k", "K", "\u212a", "s", "S", "\u017f", "\u03c3", "\u03c2", "\u03a3", "a", "B", "_", "\u0130", "i", "I", "\u0131"}

func foldDoc(rng *rand.Rand) (names []string, doc string) {
	n := 1 + rng.IntN(9)
	seen := map[string]bool{}
	for len(names) < n {
		var b strings.Builder
		for range 1 + rng.IntN(2) {
			b.WriteString(foldAlphabet[rng.IntN(len(foldAlphabet))])
		}
		if !seen[b.String()] {
			seen[b.String()] = true
			names = append(names, b.String())
		}
	}
	var d strings.Builder
	d.WriteByte('{')
	for i, nm := range names {
		if i > 0 {
			d.WriteByte(',')
		}
		fmt.Fprintf(&d, "%s:%d", strconv.Quote(nm), i)
	}
	d.WriteByte('}')
	return names, d.String()
}

// expected canonical form, independently: names sorted by bytes, each fold class (encoding/json's
// foldName) with >1 member written where its least name sorts, in document order.
func foldWant(names []string) string {
	idx := map[string]int{}
	for i, n := range names {
		idx[n] = i
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	classes := map[string][]string{}
	for _, n := range names { // document order
		classes[jsonFoldName([]byte(n))] = append(classes[jsonFoldName([]byte(n))], n)
	}
	done := map[string]bool{}
	var out []string
	for _, n := range sorted {
		k := jsonFoldName([]byte(n))
		if done[k] {
			continue
		}
		done[k] = true
		out = append(out, classes[k]...)
	}
	var d strings.Builder
	d.WriteByte('{')
	for i, nm := range out {
		if i > 0 {
			d.WriteByte(',')
		}
		d.WriteString(string(appendString(nil, nm)))
		fmt.Fprintf(&d, ":%d", idx[nm])
	}
	d.WriteByte('}')
	return d.String()
}

var foldPad = regexp.MustCompile(`,?"~p\d\d":0`)

// Property: the ≤32 (EqualFold pairs) and >32 (foldKey map) paths agree; output is idempotent and
// equals an independent oracle built on encoding/json's folding.
func TestCanonicalFoldPathsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(54, 1))
	var pad strings.Builder
	for i := range 40 {
		fmt.Fprintf(&pad, `,"~p%02d":0`, i)
	}
	for it := range 20000 {
		names, doc := foldDoc(rng)
		small, err := CanonicalJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		big, err := CanonicalJSON([]byte(doc[:len(doc)-1] + pad.String() + "}"))
		if err != nil {
			t.Fatal(err)
		}
		stripped := foldPad.ReplaceAllString(string(big), "")
		stripped = strings.Replace(stripped, "{,", "{", 1)
		if stripped != string(small) {
			t.Fatalf("it %d %s: ≤32 path %s, >32 path %s", it, doc, small, stripped)
		}
		again, err := CanonicalJSON(small)
		if err != nil || !bytes.Equal(again, small) {
			t.Fatalf("not idempotent: %s → %s → %s %v", doc, small, again, err)
		}
		if want := foldWant(names); want != string(small) {
			t.Fatalf("%s: got %s want %s", doc, small, want)
		}
	}
}

// foldKey is exactly bytes.EqualFold / encoding/json's foldName, rune by rune over all of Unicode.
func TestFoldKeyAllRunes(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		b := utf8.AppendRune(nil, r)
		if jsonFoldName(b) != jsonFoldName([]byte(foldKey(b))) {
			t.Fatalf("%U", r)
		}
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			fb := utf8.AppendRune(nil, f)
			if foldKey(b) != foldKey(fb) || !bytes.EqualFold(b, fb) || jsonFoldName(b) != jsonFoldName(fb) {
				t.Fatalf("%U %U", r, f)
			}
		}
	}
}

// A noise member that folds with a kept member does not change where the kept one is written: the
// canonical form (and the fingerprint) does not depend on whether the noise field is present (found
// by a review: it did).
func TestCanonicalNoiseDoesNotMoveCaseVariants(t *testing.T) {
	with, err := CanonicalJSON([]byte(`{"k":"noise","\u212a":1,"m":2}`), "k")
	if err != nil {
		t.Fatal(err)
	}
	without, err := CanonicalJSON([]byte(`{"\u212a":1,"m":2}`), "k")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(with, without) {
		t.Errorf("noise k present: %s; absent: %s", with, without)
	}
	// ASCII only: noise "traceID"; kept "traceid" and "trace_id".
	a, _ := CanonicalJSON([]byte(`{"traceID":"x","traceid":1,"trace_id":2}`), "traceID")
	b, _ := CanonicalJSON([]byte(`{"traceid":1,"trace_id":2}`), "traceID")
	if !bytes.Equal(a, b) {
		t.Errorf("noise traceID present: %s; absent: %s", a, b)
	}
}

// A derived key left behind by an inner source whose result was discarded (All inside FirstOf) is not
// taken for the client's header key equal to it: that key is refused past the limits, not hashed
// (found by a review).
func TestStaleDerivedKeyNotTakenForClientKey(t *testing.T) {
	g := memoryGuard(t, &idemkit.Options{MaxKeyLen: 100})
	ran := false
	h := Middleware(g, &Options{Key: FirstOf(All(JSONFields("id"), Query("tenant")), Header("Idempotency-Key"))})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true; w.WriteHeader(201) }))
	long := strings.Repeat("z", 110)
	rec := serve(h, req("POST", "/orders", long, `{"id":"`+long+`"}`))
	t.Logf("client header key of 110 bytes (Guard MaxKeyLen 100, Options.MaxKeyLen 100): %d ran=%v %s", rec.Code, ran, rec.Body.String())
	if rec.Code != 400 {
		t.Errorf("client key past MaxKeyLen accepted: %d", rec.Code)
	}
	rec = serve(h, req("POST", "/orders", long, `{"id":"other"}`))
	t.Logf("same header key, other body: %d", rec.Code)
}

// bodyFor after failures: the handler reads exactly the original bytes, once.
type foldFlakyReader struct {
	data  []byte
	pos   int
	errAt int
	fired bool
}

func (f *foldFlakyReader) Read(p []byte) (int, error) {
	if f.pos >= len(f.data) {
		return 0, io.EOF
	}
	if !f.fired && f.pos >= f.errAt {
		f.fired = true
		return 0, fmt.Errorf("transient")
	}
	end := min(len(f.data), f.pos+min(len(p), 7))
	if !f.fired && end > f.errAt {
		end = f.errAt
	}
	n := copy(p, f.data[f.pos:end])
	f.pos += n
	return n, nil
}
func (f *foldFlakyReader) Close() error { return nil }

func TestBodyForReadsOnce(t *testing.T) {
	data := []byte(strings.Repeat("0123456789", 300))
	for _, limit := range []int64{10, 1000, 2999, 3000, 5000} {
		for _, declared := range []int64{-1, 3000} {
			for _, errAt := range []int{-1, 0, 5, 1500} {
				var src io.ReadCloser = io.NopCloser(bytes.NewReader(data))
				if errAt >= 0 {
					src = &foldFlakyReader{data: data, errAt: errAt}
				}
				r, _ := http.NewRequest("POST", "/", nil)
				r.ContentLength = declared
				st := &reqState{cfg: &config{Options: Options{MaxBodyBytes: limit}}, src: src}
				_, err := st.loadBody(r)
				got, err2 := io.ReadAll(st.bodyFor())
				if err2 == nil && !bytes.Equal(got, data) || err2 != nil && !bytes.HasPrefix(data, got) {
					t.Errorf("limit %d declared %d errAt %d: loadBody %v; handler read %d bytes (%v)", limit, declared, errAt, err, len(got), err2)
				}
			}
		}
	}
	// An outer MaxBytesReader's limit: the handler reads its n bytes, then its error.
	rec := &discardWriter{h: http.Header{}}
	mbr := http.MaxBytesReader(rec, io.NopCloser(bytes.NewReader(data)), 100)
	r, _ := http.NewRequest("POST", "/", nil)
	r.ContentLength = -1
	st := &reqState{cfg: &config{Options: Options{MaxBodyBytes: 1000}}, src: mbr}
	_, err := st.loadBody(r)
	got, err2 := io.ReadAll(st.bodyFor())
	var mbe *http.MaxBytesError
	if len(got) != 100 || !asMBE(err2, &mbe) {
		t.Errorf("outer MaxBytesReader: loadBody %v; handler %d bytes, %v", err, len(got), err2)
	}
}

type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

func asMBE(err error, target **http.MaxBytesError) bool {
	e, ok := err.(*http.MaxBytesError)
	if ok {
		*target = e
	}
	return ok
}

func FuzzCanonicalFoldPaths(f *testing.F) {
	for _, s := range []string{`{"qty":1,"QTY":3,"Qty":2}`, `{"\u212a":1,"k":2,"K":3}`, `{"a":{"S":1,"\u017f":2},"A":[{"\u03c3":1,"\u03a3":2,"\u03c2":3}]}`, `{"k":1,"m":{"K":2,"k":3}}`} {
		f.Add([]byte(s))
	}
	var pad strings.Builder
	for i := range 40 {
		fmt.Fprintf(&pad, `,"~p%02d":0`, i)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := CanonicalJSON(data, "nonce")
		if err != nil {
			return
		}
		again, err := CanonicalJSON(c, "nonce")
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("not idempotent: %s → %s → %s", data, c, again)
		}
		if len(c) < 2 || c[0] != '{' || c[1] == '}' || bytes.Contains(data, []byte("~p")) {
			return
		}
		big, err := CanonicalJSON(append(bytes.TrimRight(c[:len(c)-1], " "), pad.String()+"}"...), "nonce")
		if err != nil {
			t.Fatal(err)
		}
		s := foldPad.ReplaceAllString(string(big), "")
		s = strings.Replace(s, "{,", "{", 1)
		if s != string(c) {
			t.Fatalf("paths differ: %s vs %s", c, s)
		}
	})
}
