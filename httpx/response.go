package httpx

import (
	"encoding/binary"
	"errors"
	"net/http"
	"net/textproto"
	"strconv"
)

// storedResponse is a response as stored for replay: the value the guarded function returns.
type storedResponse struct {
	status int
	header []headerField // canonical names, in the order written
	body   []byte
	// omitted: the body was not stored (larger than Options.MaxResponseBytes, or Reject mode);
	// size is then its length.
	omitted bool
	size    uint64
}

type headerField struct{ name, value string }

// The stored form of a response:
//
//	byte 0    format version (1)
//	byte 1    flags: bit 0 set when the body was omitted; other bits zero
//	uvarint   status (100-999)
//	uvarint   number of header fields (at most maxStoredFields)
//	          each: uvarint n + n bytes name, uvarint n + n bytes value
//	omitted:  uvarint original body size, nothing after it
//	else:     the rest is the body
const (
	responseFormat  = 1
	flagOmitted     = 1 << 0
	maxStoredFields = 256
)

var errBadResponse = errors.New("httpx: malformed stored response")

func (s *storedResponse) encode() []byte {
	n := 2 + 3*binary.MaxVarintLen64 + len(s.body)
	for _, f := range s.header {
		n += 2*binary.MaxVarintLen32 + len(f.name) + len(f.value)
	}
	b := make([]byte, 0, n)
	var flags byte
	if s.omitted {
		flags |= flagOmitted
	}
	b = append(b, responseFormat, flags)
	b = binary.AppendUvarint(b, uint64(s.status))
	b = binary.AppendUvarint(b, uint64(len(s.header)))
	for _, f := range s.header {
		b = binary.AppendUvarint(b, uint64(len(f.name)))
		b = append(b, f.name...)
		b = binary.AppendUvarint(b, uint64(len(f.value)))
		b = append(b, f.value...)
	}
	if s.omitted {
		return binary.AppendUvarint(b, s.size)
	}
	return append(b, s.body...)
}

// decodeResponse parses what encode wrote. It never panics, whatever b holds, and checks what a
// replay writes: a valid status, header names that are tokens, values without CR, LF or other
// control characters. The body aliases b.
func decodeResponse(b []byte) (storedResponse, error) {
	var s storedResponse
	if len(b) < 2 || b[0] != responseFormat || b[1]&^flagOmitted != 0 {
		return s, errBadResponse
	}
	s.omitted = b[1]&flagOmitted != 0
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
		var name, value []byte
		var ok bool
		if name, b, ok = cutField(b); !ok || !isToken(string(name)) {
			return s, errBadResponse
		}
		if value, b, ok = cutField(b); !ok || !validFieldValue(value) {
			return s, errBadResponse
		}
		s.header = append(s.header, headerField{textproto.CanonicalMIMEHeaderKey(string(name)), string(value)})
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

// write replays s to w: the stored headers (minus any never replayed), Idempotent-Replayed: true,
// Content-Length, the status and the body.
func (s *storedResponse) write(w http.ResponseWriter) {
	h := w.Header()
	for _, f := range s.header {
		if !neverReplayed[f.name] {
			h.Add(f.name, f.value)
		}
	}
	h.Set(ReplayedHeader, "true")
	if bodyAllowed(s.status) {
		h.Set("Content-Length", strconv.Itoa(len(s.body)))
	}
	w.WriteHeader(s.status)
	if len(s.body) > 0 && bodyAllowed(s.status) {
		_, _ = w.Write(s.body)
	}
}

// bodyAllowed reports whether a response with status may have a body (RFC 9110).
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}
