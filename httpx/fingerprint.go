package httpx

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// fingerprintVersion is hashed first, so a future change of the canonical form cannot collide with
// this one.
const fingerprintVersion = "idemkit-httpx-fp/1"

// fingerprint is the hex SHA-256 of the canonical request: method, scope, escaped path, query
// (sorted, noise parameters removed) and body, canonical JSON without noise when the content type is
// JSON (or absent) and the body parses, a multipart body's parts without its boundary (see
// appendMultipart), else the raw bytes; a gzip body (Content-Encoding) by what it decodes to, in the
// same way (see gunzipped). The path is included because a scope is usually a pattern
// ("/orders/{id}/pay"): the same key and body sent to another order must not replay the first
// order's response. A JSON body that repeats a member name has no fingerprint:
// the error matches ErrDuplicateMember.
func fingerprint(r *http.Request, scope string, body []byte, st *reqState) (string, error) {
	h := sha256.New()
	var arr [256]byte
	h.Write(appendTarget(arr[:0], r, scope, st))
	content, encoded := st.payload(r, body)
	if encoded {
		// A gzip body is its content: two compressions of one document differ in their bytes (the
		// header's time stamp, the compressor's choices), and a retry compresses afresh. Marked, so
		// it never matches the same content sent unencoded, which the handler reads differently.
		h.Write([]byte{'g'})
	}
	return appendBody(h, r, content, func() ([]byte, bool, error) {
		canon, err := st.canonical()
		return canon, st.canonLossy, err
	})
}

// targetFingerprint is the fingerprint of a request whose payload is not checked
// (Options.NoFingerprint): its method, scope, escaped path and query as in fingerprint, and a mark
// standing for the body left out. The scope is usually a pattern: without the path, the same key
// sent to /orders/2/pay would replay the response of /orders/1/pay.
func targetFingerprint(r *http.Request, scope string, st *reqState) string {
	var arr [256]byte
	sum := sha256.Sum256(append(appendTarget(arr[:0], r, scope, st), 'n'))
	return hex.EncodeToString(sum[:])
}

// appendTarget appends to buf what every fingerprint starts with, each field framed as a JSON
// string (length-safe): the version, the method, the scope, the escaped path and the canonical
// query.
func appendTarget(buf []byte, r *http.Request, scope string, st *reqState) []byte {
	buf = appendString(buf, fingerprintVersion)
	buf = appendString(buf, r.Method)
	buf = appendString(buf, scope)
	buf = appendString(buf, r.URL.EscapedPath())
	return appendString(buf, canonicalQuery(r.URL.RawQuery, st.cfg.noise))
}

// appendBody writes body to h — canonical JSON (from canonical) when the content type is JSON or
// absent and the body parses, a multipart body's parts, else the raw bytes — and returns the
// fingerprint.
func appendBody(h hash.Hash, r *http.Request, body []byte, canonical func() ([]byte, bool, error)) (string, error) {
	if len(body) > 0 && isJSONContent(r.Header.Get("Content-Type")) {
		// A body whose strings decode lossily (invalid UTF-8, an unpaired surrogate: parsers disagree
		// on them, as on a repeated member) is fingerprinted by its bytes, so two such bodies that
		// differ are never taken for the same payload.
		switch canon, lossy, err := canonical(); {
		case err == nil && !lossy:
			h.Write([]byte{'j'})
			h.Write(canon)
			return hex.EncodeToString(h.Sum(nil)), nil
		case err != nil && err != errNotJSON:
			return "", err
		}
	}
	if len(body) > 0 && appendMultipart(h, body, r.Header.Get("Content-Type")) {
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	h.Write([]byte{'r'})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// gunzipped returns what body decodes to when the request's one content coding is gzip (x-gzip) and
// body is a whole, valid gzip stream of at most limit decoded bytes; ok is false otherwise (no or
// another coding, a corrupt stream, one decoding past the limit), and the body counts as its bytes.
func gunzipped(header http.Header, body []byte, limit int64) (decoded []byte, ok bool) {
	codings := header.Values("Content-Encoding")
	if len(body) == 0 || len(codings) != 1 {
		return nil, false
	}
	if c := strings.TrimSpace(codings[0]); !strings.EqualFold(c, "gzip") && !strings.EqualFold(c, "x-gzip") {
		return nil, false
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, false
	}
	decoded, err = readLimited(zr, -1, limit)
	if err != nil {
		return nil, false
	}
	return decoded, true
}

// appendMultipart writes to h the parts of a multipart body (multipart/form-data and the like): each
// part's header fields, sorted by name, and its content, in order. The boundary is left out: clients
// choose a fresh random one each time they build a request (curl -F, browsers, most libraries), so a
// retry of the same upload differs from the first in its bytes. It reports false, having written
// nothing, when the body is not a well-formed multipart body of the content type ct.
func appendMultipart(h hash.Hash, body []byte, ct string) bool {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || !strings.HasPrefix(mt, "multipart/") || params["boundary"] == "" {
		return false
	}
	var canon []byte
	field := func(s string) { canon = appendString(canon, s) }
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return false
		}
		names := slices.Sorted(maps.Keys(p.Header))
		field(strconv.Itoa(len(names)))
		for _, name := range names {
			field(name)
			field(strconv.Itoa(len(p.Header[name])))
			for _, v := range p.Header[name] {
				field(v)
			}
		}
		content, err := io.ReadAll(p)
		if err != nil {
			return false
		}
		field(string(content))
	}
	h.Write([]byte{'m'})
	h.Write(canon)
	return true
}

// canonicalQuery sorts the query by name (values keep their order) and drops noise names; an
// unparsable query is kept as sent.
func canonicalQuery(raw string, ns *noiseSet) string {
	if raw == "" {
		return ""
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "\x00" + raw
	}
	if ns != nil {
		for name := range ns.names {
			q.Del(name)
		}
	}
	return q.Encode()
}

// isJSONContent reports whether a Content-Type is JSON (application/json, anything+json) or absent.
func isJSONContent(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(mt)
	return strings.EqualFold(mt, "application/json") || len(mt) > 5 && strings.EqualFold(mt[len(mt)-5:], "+json")
}
