package httpx

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/idemkit/idemkit"
)

// KeySource derives the idempotency key of a request. It returns "" (or [ErrKeyMissing]) when the
// request carries no key: the middleware then answers 400 (or passes the request through when
// [Options.Optional] is set). Errors are mapped to responses: one wrapping idemkit.ErrInvalidKey
// gives 400, [ErrDuplicateMember] 400, [ErrPrincipal] 403, [ErrBodyTooLarge] 413, [ErrTokenInvalid] 409,
// idemkit.ErrStoreUnavailable 503, any other 400.
//
// Keys taken from the client as they are (header, query, URL parameter, token) must be at most
// [Options.MaxKeyLen] bytes of printable UTF-8. Keys derived from the payload ([JSONFields], [All])
// are hashed (SHA-256) when longer than idemkit.MaxStoredLen or not printable.
//
// A custom KeySource may read the body with [Body]; it must not consume r.Body. Any
// func(*http.Request) (string, error) converts to a KeySource.
type KeySource func(r *http.Request) (string, error)

// Header takes the key from the request header name, parsed with [ParseKey]: a Structured Field
// String (`"abc"`) or a bare value. A header given more than once is invalid (400).
func Header(name string) KeySource {
	if !isToken(name) {
		panic(fmt.Sprintf("httpx: Header: %q is not a header name", name))
	}
	return func(r *http.Request) (string, error) {
		vals := r.Header.Values(name)
		switch len(vals) {
		case 0:
			return "", nil
		case 1:
			key, err := ParseKey(vals[0])
			if err != nil && !errors.Is(err, errKeyEmpty) {
				err = fmt.Errorf("%w (%w)", err, errHeaderSyntax)
			}
			return key, err
		}
		return "", fmt.Errorf("%w: %s %w", idemkit.ErrInvalidKey, name, errMultipleKeys)
	}
}

// Query takes the key from the query parameter name. A parameter given more than once is invalid,
// and so is one given empty (?key= or ?key, as an empty header is) or one net/url cannot parse (a bad
// percent escape, a semicolon in its pair), rather than taken for no key; only an absent parameter
// is no key.
func Query(name string) KeySource {
	if name == "" {
		panic("httpx: Query: empty parameter name")
	}
	return func(r *http.Request) (string, error) {
		vals, ok := queryValues(r.URL.RawQuery, name)
		if !ok {
			return "", fmt.Errorf("%w: query parameter %s is malformed", idemkit.ErrInvalidKey, name)
		}
		switch len(vals) {
		case 0:
			return "", nil
		case 1:
			if vals[0] == "" {
				return "", fmt.Errorf("%w: query parameter %s %w", idemkit.ErrInvalidKey, name, errKeyEmpty)
			}
			return vals[0], nil
		}
		return "", fmt.Errorf("%w: query parameter %s %w", idemkit.ErrInvalidKey, name, errMultipleKeys)
	}
}

// queryValues returns the values of the parameter name in the raw query as url.ParseQuery reads
// them; ok is false when a pair naming it is one ParseQuery drops: a value with a bad escape, or
// a pair holding a semicolon (once a separator), whichever of its parts names it.
func queryValues(raw, name string) (vals []string, ok bool) {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		parts := strings.Split(pair, ";")
		for _, part := range parts {
			k, v, _ := strings.Cut(part, "=")
			if k, err := url.QueryUnescape(k); err != nil || k != name {
				continue
			}
			v, err := url.QueryUnescape(v)
			if err != nil || len(parts) > 1 {
				return nil, false
			}
			vals = append(vals, v)
		}
	}
	return vals, true
}

// URLParam takes the key from the route parameter name: chi's URL parameter when routed by chi
// (also when the middleware runs before routing), else http.Request.PathValue (http.ServeMux, also
// one mounted in chi). A parameter chi matched to an empty segment ("/orders//pay" for
// "/orders/{id}/pay"), or a ServeMux remainder wildcard matched to nothing ("/files/" for
// "/files/{path...}"), is an invalid key (400, also with Optional), as an empty header is. A
// ServeMux sets path values only when it routes the request, after a middleware wrapped around the
// whole mux has run: there URLParam finds none (no key: 400 missing-key, or an unguarded run with
// Options.Optional). Put the middleware on the mux's route (mux.Handle("POST /orders/{id}/pay",
// mw(h))) for such a key.
func URLParam(name string) KeySource {
	if name == "" {
		panic("httpx: URLParam: empty parameter name")
	}
	return func(r *http.Request) (string, error) {
		st, done := stateFor(r)
		defer done()
		matchedEmpty := false
		if _, rctx, _ := st.route(r); rctx != nil {
			if v := rctx.URLParam(name); v != "" {
				return v, nil
			}
			// chi matches a parameter in the middle of a path to an empty segment ("/orders//pay").
			matchedEmpty = slices.Contains(rctx.URLParams.Keys, name)
			// Else not chi's: a ServeMux mounted in chi may have routed the request after it.
		}
		if v := r.PathValue(name); v != "" || !matchedEmpty && !muxWildcard(r.Pattern, name) {
			return v, nil
		}
		// As an empty header or ?key=: a key given empty, not one every such request shares, nor
		// no key (with Optional, an unguarded run).
		return "", fmt.Errorf("%w: route parameter %s %w", idemkit.ErrInvalidKey, name, errKeyEmpty)
	}
}

// muxWildcard reports whether the ServeMux pattern p names the wildcard name ("{name}", or
// "{name...}", which matches an empty remainder of the path: "/files/" for "/files/{path...}").
func muxWildcard(p, name string) bool {
	return strings.Contains(p, "{"+name+"}") || strings.Contains(p, "{"+name+"...}")
}

// JSONFields derives the key from fields of the JSON request body (a gzip body, Content-Encoding,
// by what it decodes to), each named by a dotted path ("order.id"; a segment of digits indexes an
// array: "items.0.sku"). A string field gives its text, a number its canonical form (1.0 and 1 are
// equal), a boolean true/false, an object or array its canonical JSON without the noise fields.
// Several paths give a JSON array of those texts. A body that is not JSON, or a missing or null
// field, means no key; an empty string is an invalid key (400, as an empty header or query
// parameter is: not one key every such request shares); a JSON body that repeats a member name
// anywhere is an error matching [ErrDuplicateMember] (400). Names match exactly; a member on the
// path whose name differs from it only in case ({"ID":…} for "id"), instead of the exact name or
// beside it, is an invalid key (400), never no key: encoding/json would decode it into the
// handler's field, so the request's key would be ambiguous (or, with Optional, the request run
// unguarded). It panics when no path is given or a path is malformed.
func JSONFields(paths ...string) KeySource {
	if len(paths) == 0 {
		panic("httpx: JSONFields: no path")
	}
	for _, p := range paths {
		if p == "" || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") || strings.Contains(p, "..") {
			panic(fmt.Sprintf("httpx: JSONFields: malformed path %q", p))
		}
	}
	paths = append([]string(nil), paths...)
	return func(r *http.Request) (string, error) {
		st, done := stateFor(r)
		defer done()
		doc, ok, err := st.json(r)
		if err != nil || !ok {
			return "", err
		}
		var parts []byte
		for i, p := range paths {
			v, where, folded, ok := lookupJSON(doc, p)
			if folded != "" {
				return "", fmt.Errorf("%w: %w", idemkit.ErrInvalidKey, &keyCaseError{path: p, name: folded})
			}
			if !ok {
				return "", nil
			}
			if v == "" { // as an empty header or query parameter: not a key every such request shares
				return "", fmt.Errorf("%w: JSON field %s %w", idemkit.ErrInvalidKey, p, errKeyEmpty)
			}
			var canon []byte // an object's or array's canonical text comes from the body's
			switch v.(type) {
			case map[string]any, []any:
				canon, _ = st.canonical()
			}
			text, ok := keyText(v, st.cfg.noise, where, canon, p)
			if !ok {
				return "", nil
			}
			if len(paths) == 1 {
				return markDerived(r, idemkit.DerivedKey(text)), nil
			}
			if i == 0 {
				parts = append(parts, '[')
			} else {
				parts = append(parts, ',')
			}
			parts = appendString(parts, text)
		}
		return markDerived(r, idemkit.DerivedKey(string(append(parts, ']')))), nil
	}
}

// FirstOf takes the key from the first source that yields one. A source that yields none ("" or
// [ErrKeyMissing]) is passed over; any other error is returned at once, without trying the rest.
func FirstOf(sources ...KeySource) KeySource {
	sources = checkSources("FirstOf", sources)
	return func(r *http.Request) (string, error) {
		for _, s := range sources {
			k, err := s(r)
			if errors.Is(err, ErrKeyMissing) {
				continue
			}
			if err != nil || k != "" {
				return k, err
			}
		}
		return "", nil
	}
}

// All derives the key from every source together (for example a URL parameter and a body field);
// when any yields no key there is no key. The parts are joined unambiguously and hashed when long.
func All(sources ...KeySource) KeySource {
	sources = checkSources("All", sources)
	return func(r *http.Request) (string, error) {
		var parts []byte
		for i, s := range sources {
			k, err := s(r)
			if err != nil || k == "" {
				if st := stateOf(r); st != nil {
					st.derivedKey = "" // an inner source's derived key was not used
				}
				return "", err
			}
			if i == 0 {
				parts = append(parts, '[')
			} else {
				parts = append(parts, ',')
			}
			parts = appendString(parts, k)
		}
		return markDerived(r, idemkit.DerivedKey(string(append(parts, ']')))), nil
	}
}

func checkSources(fn string, sources []KeySource) []KeySource {
	if len(sources) == 0 {
		panic("httpx: " + fn + ": no source")
	}
	for _, s := range sources {
		if s == nil {
			panic("httpx: " + fn + ": nil source")
		}
	}
	return append([]KeySource(nil), sources...)
}

// stateFor returns the middleware's state of r, or a temporary one for a key source called
// outside the middleware; done puts back a body the temporary state read.
func stateFor(r *http.Request) (st *reqState, done func()) {
	if st := stateOf(r); st != nil {
		return st, func() {}
	}
	cfg, _ := (*Options)(nil).withDefaults()
	st = &reqState{cfg: cfg, src: r.Body}
	return st, func() { r.Body = st.bodyFor() }
}

// printable reports whether s is valid UTF-8 without control characters ("" is).
func printable(s string) bool { return s == "" || idemkit.ValidateKey(s, len(s)) == nil }

// PrincipalKey returns the key stored for a client key sent by principal when Options.Principal
// is set: "<len>:<principal>:<key>", or its "sha256:" hash form when longer than
// idemkit.MaxStoredLen or not printable. Use it with idemkit.Guard.Get. Every such key starts with
// a digit or "sha256:", and the length prefix makes it unambiguous, so no key sent by one principal
// (or an anonymous caller, principal "") can equal another principal's.
func PrincipalKey(principal, key string) string { return idemkit.PrincipalKey(principal, key) }
