package httpx

import (
	"encoding/binary"
	"errors"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
)

// storedResponse is a response as stored for replay: the value the guarded function returns.
type storedResponse struct {
	status int
	header []headerField // the handler's changes to the headers, canonical names, in order
	body   []byte
	// omitted: the body was not stored (larger than Options.MaxResponseBytes, Reject mode, too many
	// header fields, or encoded by the handler); size is then its length. encoded: it was omitted
	// because the handler set Content-Encoding, which is never stored.
	omitted bool
	encoded bool
	size    uint64
}

// headerField is one change the handler made to a response header: add value to name, or, when
// clear is set, remove the values name had before the handler ran (set by outer middleware).
type headerField struct {
	name, value string
	clear       bool
	trailer     bool // a trailer: sent after the body (format 3)
}

// The stored form of a response (format 2, or 3 when it has trailers; format 1, written before, is
// read too, a body stored with Content-Encoding then counting as omitted and encoded):
//
//	byte 0    format version (2, or 3 when a field is a trailer)
//	byte 1    flags: bit 0 set when the body was omitted, bit 1 when it was omitted because the
//	          handler encoded it; other bits zero
//	uvarint   status (100-999)
//	uvarint   number of header fields (at most maxStoredFields)
//	          each: byte op (0 add, 1 clear, 2 add a trailer: format 3 only), uvarint n + n bytes
//	          name, and for an add uvarint n + n bytes value (format 1: no op byte, every field an add)
//	omitted:  uvarint original body size, nothing after it
//	else:     the rest is the body
const (
	responseFormatV1 = 1
	responseFormat   = 2
	responseFormatV3 = 3 // format 2 with trailers: written only when there are some
	flagOmitted      = 1 << 0
	flagEncoded      = 1 << 1
	maxStoredFields  = 256
	opAdd            = 0
	opClear          = 1
	opTrailer        = 2
)

var errBadResponse = errors.New("httpx: malformed stored response")

func (s *storedResponse) encode() []byte {
	n := 2 + 3*binary.MaxVarintLen64 + len(s.body)
	for _, f := range s.header {
		n += 1 + 2*binary.MaxVarintLen32 + len(f.name) + len(f.value)
	}
	b := make([]byte, 0, n)
	var flags byte
	if s.omitted {
		flags |= flagOmitted
	}
	if s.encoded {
		flags |= flagEncoded
	}
	format := byte(responseFormat)
	if slices.ContainsFunc(s.header, func(f headerField) bool { return f.trailer }) {
		format = responseFormatV3 // a process that reads format 2 only fails on it, rather than drop them
	}
	b = append(b, format, flags)
	b = binary.AppendUvarint(b, uint64(s.status))
	b = binary.AppendUvarint(b, uint64(len(s.header)))
	for _, f := range s.header {
		switch {
		case f.clear:
			b = append(b, opClear)
		case f.trailer:
			b = append(b, opTrailer)
		default:
			b = append(b, opAdd)
		}
		b = binary.AppendUvarint(b, uint64(len(f.name)))
		b = append(b, f.name...)
		if !f.clear {
			b = binary.AppendUvarint(b, uint64(len(f.value)))
			b = append(b, f.value...)
		}
	}
	if s.omitted {
		return binary.AppendUvarint(b, s.size)
	}
	return append(b, s.body...)
}

// decodeResponse parses what encode wrote (either format). It never panics, whatever b holds, and
// checks what a replay writes: a valid status, header names that are tokens, values without CR, LF
// or other control characters. The body aliases b.
func decodeResponse(b []byte) (storedResponse, error) {
	var s storedResponse
	if len(b) < 2 {
		return s, errBadResponse
	}
	format, flags := b[0], b[1]
	switch {
	case format == responseFormatV1 && flags&^flagOmitted == 0:
	case (format == responseFormat || format == responseFormatV3) && flags&^(flagOmitted|flagEncoded) == 0 && (flags&flagEncoded == 0 || flags&flagOmitted != 0):
	default:
		return s, errBadResponse
	}
	s.omitted, s.encoded = flags&flagOmitted != 0, flags&flagEncoded != 0
	b = b[2:]
	status, n := binary.Uvarint(b)
	if n <= 0 || status < 100 || status > 999 {
		return s, errBadResponse
	}
	s.status, b = int(status), b[n:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > maxStoredFields {
		return s, errBadResponse
	}
	b = b[n:]
	if count > 0 {
		s.header = make([]headerField, 0, count)
	}
	for range count {
		op := byte(opAdd)
		if format != responseFormatV1 {
			if len(b) == 0 || b[0] > opTrailer || b[0] == opTrailer && format != responseFormatV3 {
				return s, errBadResponse
			}
			op, b = b[0], b[1:]
		}
		var name, value []byte
		var ok bool
		if name, b, ok = cutField(b); !ok || !isToken(string(name)) {
			return s, errBadResponse
		}
		if op != opClear {
			if value, b, ok = cutField(b); !ok || !validFieldValue(value) {
				return s, errBadResponse
			}
		}
		s.header = append(s.header, headerField{textproto.CanonicalMIMEHeaderKey(string(name)), string(value), op == opClear, op == opTrailer})
	}
	if s.omitted {
		if s.size, n = binary.Uvarint(b); n <= 0 || n != len(b) {
			return s, errBadResponse
		}
		return s, nil
	}
	if len(b) > 0 {
		s.body = b
	}
	if format == responseFormatV1 && slices.ContainsFunc(s.header, func(f headerField) bool {
		return f.name == "Content-Encoding" && !strings.EqualFold(strings.TrimSpace(f.value), "identity")
	}) {
		// Format 1 stored Content-Encoding, which is no longer replayed, with the body the handler
		// encoded: replayed without it, the body would reach the client as garbage. Such a body
		// counts as encoded by the handler (see captureWriter.changes): not replayed.
		s.omitted, s.encoded, s.size, s.body = true, true, uint64(len(s.body)), nil
	}
	return s, nil
}

func cutField(b []byte) (field, rest []byte, ok bool) {
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return nil, nil, false
	}
	end := n + int(l)
	return b[n:end], b[end:], true
}

// validFieldValue reports whether v is a header value net/http writes unchanged: no control
// characters except horizontal tab.
func validFieldValue(v []byte) bool {
	for _, c := range v {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// write replays s to w: the handler's header changes (minus any never replayed) applied to what
// outer middleware put on the response, Idempotent-Replayed: true, the status, the body and the
// trailers (declared in a Trailer header, as net/http needs to send them after the body). No
// Content-Length is set: outer middleware may transform the body (compress it), and net/http adds
// one itself to a small body that arrives in one piece; but a response to a HEAD (head), which has
// no body, gets the Content-Length the handler declared, when one is stored (see
// captureWriter.result: with no body, or the body of that length the handler wrote).
func (s *storedResponse) write(w http.ResponseWriter, head bool) {
	h := w.Header()
	for _, f := range s.header {
		switch {
		case head && f.name == "Content-Length" && !f.clear && !f.trailer && (len(s.body) == 0 || f.value == strconv.Itoa(len(s.body))):
			h.Set(f.name, f.value)
		case neverStored(f.name), f.trailer:
		case f.clear && f.name == "Content-Type":
			// The handler left the response without a type (removed or suppressed it): so does the
			// replay, where net/http would otherwise sniff one from the body. A value after the
			// clear replaces the nil.
			h["Content-Type"] = nil
		case f.clear:
			delField(h, f.name)
		default:
			h.Add(f.name, f.value)
		}
	}
	var trailers []string
	for _, f := range s.header {
		if f.trailer && !neverStored(f.name) && !slices.Contains(trailers, f.name) {
			trailers = append(trailers, f.name)
		}
	}
	if len(trailers) > 0 {
		// Declared before the status (net/http takes its copy of the header then), set after the body.
		h.Add("Trailer", strings.Join(trailers, ", "))
	}
	h.Set(ReplayedHeader, "true")
	w.WriteHeader(s.status)
	if len(s.body) > 0 && bodyAllowed(s.status) {
		_, _ = w.Write(s.body)
	}
	for _, name := range trailers {
		h.Del(name) // a header of that name went out with the status; the trailer is the stored values
	}
	for _, f := range s.header {
		if f.trailer && !neverStored(f.name) {
			h.Add(f.name, f.value)
		}
	}
}

// delField removes the field with the canonical name from h under every spelling: outer middleware
// may have set it under a non-canonical key (h["ETag"]), which net/http sends all the same and the
// stored changes count as the field's (see fieldValues), so a clear must remove it too.
func delField(h http.Header, name string) {
	for k := range h {
		if k == name || textproto.CanonicalMIMEHeaderKey(k) == name {
			delete(h, k)
		}
	}
}

// bodyAllowed reports whether a response with status may have a body (RFC 9110).
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}
