package httpx

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idemkit"
)

// captureWriter streams a handler's response to the client and keeps a copy for the record: the
// status, the changes the handler made to the allow-listed headers by the time it sent the status,
// and the body up to Options.MaxResponseBytes. It implements http.Flusher and http.Hijacker, and
// Unwrap for http.ResponseController. It is used by one goroutine, the handler's.
//
// The copy is what the handler wrote, not what reached the client: when a write to the client fails
// (the client went away, an http.TimeoutHandler around the middleware timed out), the rest of the
// response is still recorded and the handler's writes succeed while it is — the client that missed
// its response retries, and the retry gets all of it, never a cut-short copy. Once the body outgrows
// MaxResponseBytes nothing is recorded and the client's error reaches the handler.
//
// The header map is shared with the middleware around it: outer middleware may have set fields
// before the handler ran (a CORS Vary, a NoCache Cache-Control, an eager gzip wrapper's
// Content-Encoding) and may add more after the handler sent its status (chi's Compress). Those
// are theirs, and they set them again on the replay; storing them would duplicate them. So
// [captureWriter.start] takes a snapshot of the allow-listed fields before the handler runs and
// commit stores only the difference.
type captureWriter struct {
	w        http.ResponseWriter
	cfg      *config
	head     bool // a HEAD request: a declared Content-Length comes without the body
	ran      bool // the handler was called: the client gets its response, whatever happens next
	wrote    bool // the final status was sent
	status   int
	declared int64               // the Content-Length the handler declared when it sent the status, or -1
	before   map[string][]string // allow-listed fields (and Content-Encoding) before the handler ran
	header   []headerField
	encoded  bool // the handler set Content-Encoding: the body it wrote cannot be replayed without it
	body     []byte
	size     uint64
	// attempted is the body length the handler tried to write, refused writes included (see
	// pastLength).
	attempted uint64
	overflow  bool
	hijacked  bool
	// lost is the first error writing the body to the client; nothing more is sent to it then.
	lost error
	// bodyErr is the first error the handler met reading a request body the middleware had not
	// read whole (see watch). Atomic: the handler may read the body in a goroutine it does not wait
	// for (http.TimeoutHandler past its limit), while the middleware reads the handler's outcome.
	bodyErr atomic.Pointer[error]
	// sniff: the handler set no Content-Type (nor Transfer-Encoding) by the time it sent the status,
	// and the type is still to be sniffed from the body as net/http does, from the bytes written
	// before the first flush (settleType clears it).
	sniff bool
	// gaveUp: the handler returned without answering once its context had ended (see result).
	gaveUp bool
	// initial is the whole header before the handler ran (outer middleware's fields), for an
	// answer of the middleware's own after a handler that answered nothing (see resetHeader).
	initial http.Header
}

// start records the allow-listed header fields outer middleware set before the handler runs.
func (cw *captureWriter) start() {
	cw.ran = true
	h := cw.w.Header()
	cw.initial = h.Clone()
	odd := oddKeys(h)
	for _, name := range cw.cfg.replay {
		cw.remember(h, name, odd)
	}
	cw.remember(h, "Content-Encoding", odd)
}

// resetHeader puts the header back as it was before the handler ran, for the middleware to answer
// in its place when it answered nothing: what the handler set (a Content-Encoding for the body it
// meant to write, a Location, a cookie) belongs to a response that was never sent.
func (cw *captureWriter) resetHeader() {
	h := cw.w.Header()
	clear(h)
	maps.Copy(h, cw.initial)
}

func (cw *captureWriter) remember(h http.Header, name string, odd []string) {
	if v, ok := fieldValues(h, name, odd); ok {
		if cw.before == nil {
			cw.before = make(map[string][]string, 4)
		}
		cw.before[name] = slices.Clone(v)
	}
}

// oddKeys returns the keys of h that are not canonical: a handler may set a field by assigning to
// the map under another spelling (w.Header()["ETag"]), and net/http sends it all the same.
func oddKeys(h http.Header) []string {
	var odd []string
	for k := range h {
		if textproto.CanonicalMIMEHeaderKey(k) != k {
			odd = append(odd, k)
		}
	}
	return odd
}

// fieldValues returns the values of the field with the canonical name in h, under whichever
// spellings (odd holds the non-canonical keys of h) in the order net/http sends them (keys sorted);
// ok reports whether any of those keys is present.
func fieldValues(h http.Header, name string, odd []string) (v []string, ok bool) {
	v, ok = h[name]
	var keys []string
	for _, k := range odd {
		if textproto.CanonicalMIMEHeaderKey(k) == name {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return v, ok
	}
	if ok {
		keys = append(keys, name)
	}
	slices.Sort(keys)
	v = nil
	for _, k := range keys {
		v = append(v, h[k]...)
	}
	return v, true
}

func (cw *captureWriter) Header() http.Header { return cw.w.Header() }

// Unwrap returns the underlying writer, for http.ResponseController.
func (cw *captureWriter) Unwrap() http.ResponseWriter { return cw.w }

func (cw *captureWriter) WriteHeader(code int) {
	if !cw.wrote && !cw.hijacked && (code >= 200 || code == http.StatusSwitchingProtocols) {
		cw.commit(code)
	}
	cw.w.WriteHeader(code) // 1xx informational responses pass through and are not stored
}

func (cw *captureWriter) Write(p []byte) (int, error) {
	if !cw.wrote && !cw.hijacked {
		cw.commit(http.StatusOK)
		// As the Write below would: outer middleware sees the status go out (and may drop the
		// Content-Length, as a compressor does) before the body is checked against it.
		cw.w.WriteHeader(http.StatusOK)
	}
	cw.attempted += uint64(len(p))
	if cw.pastLength() {
		// Past the declared Content-Length: net/http's HTTP/1 server refuses such a write whole,
		// and every one after it, sending none of it; its HTTP/2 server takes it and sends the
		// excess, which its client reads as a broken response. Refused here on every protocol,
		// and not recorded: the response is cut short (see cut), not stored, and the retry runs.
		return 0, http.ErrContentLength
	}
	if cw.overflow || cw.hijacked {
		if cw.lost != nil {
			return 0, cw.lost
		}
		n, err := cw.w.Write(p)
		cw.size += uint64(n)
		return n, err
	}
	if cw.lost == nil {
		if n, err := cw.w.Write(p); err != nil {
			if !clientGone(err) {
				// The handler's mistake, not the client's absence (a body on a 204, more than its
				// Content-Length): what was refused is not part of the response.
				cw.record(p[:n])
				return n, err
			}
			cw.lost = err
		}
	}
	cw.record(p)
	if cw.overflow && cw.lost != nil {
		return 0, cw.lost
	}
	return len(p), nil
}

// pastLength reports whether the handler has tried to write more body than the Content-Length it
// declared with the status, refused writes included: net/http refuses such a write whole, and every
// one after it. A length outer middleware removed as the status went out (a compressor: the body it
// sends is another) binds nothing.
func (cw *captureWriter) pastLength() bool {
	return cw.declared >= 0 && !cw.head && !cw.hijacked && bodyAllowed(cw.status) &&
		cw.attempted > uint64(cw.declared) && declaredLength(cw.w.Header()) >= 0
}

// record adds p to the copy of the body, or gives the copy up when it outgrows MaxResponseBytes.
func (cw *captureWriter) record(p []byte) {
	cw.size += uint64(len(p))
	if cw.overflow {
		return
	}
	if len(cw.body)+len(p) > cw.cfg.MaxResponseBytes {
		cw.overflow, cw.body = true, nil
		return
	}
	cw.body = append(cw.body, p...)
}

// clientGone reports whether err, from writing the body to the client, says the response cannot
// reach it (a closed connection, a timed-out http.TimeoutHandler) rather than refusing what the
// handler wrote.
func clientGone(err error) bool {
	return !errors.Is(err, http.ErrBodyNotAllowed) && !errors.Is(err, http.ErrContentLength) && !errors.Is(err, http.ErrHijacked)
}

// Flush sends what was written so far; a no-op when the underlying writer cannot flush.
func (cw *captureWriter) Flush() { _ = cw.FlushError() }

// FlushError is Flush returning the underlying writer's error (http.ErrNotSupported when it cannot
// flush); http.ResponseController.Flush calls it. A first flush sends the headers with an implicit
// 200; they are read before the flush, since outer middleware may add its own while flushing.
func (cw *captureWriter) FlushError() error {
	if cw.lost != nil && !cw.overflow {
		return nil // nothing reaches the client any more; the response is still being recorded
	}
	if cw.wrote || cw.hijacked {
		if cw.sniff && len(cw.body) == 0 {
			// Headers sent with no body: no type, but only when they went out (a writer that
			// cannot flush sends them with the body later, and net/http sniffs it then).
			err := http.NewResponseController(cw.w).Flush()
			if err == nil {
				// The type net/http sends is the one in the copy of the header it took with the
				// status, which had none (sniff says so): one set since is not sent.
				cw.sniff = false
				cw.header = cw.untyped(cw.header, nil)
			}
			return err
		}
		cw.settleType() // net/http sniffs from what it sends with the headers
		return http.NewResponseController(cw.w).Flush()
	}
	header, encoded := cw.changes()
	err := http.NewResponseController(cw.w).Flush()
	if err == nil {
		// Headers sent with no body: net/http sniffs no type from nothing (sniff stays unset).
		cw.wrote, cw.status, cw.header, cw.encoded = true, http.StatusOK, cw.untyped(header, cw.w.Header()), encoded
		cw.declared = declaredLength(cw.w.Header())
	}
	return err
}

// untyped returns header with a clear of Content-Type added when the headers went out with no type
// (flushed before any body, so net/http sniffed none; sent holds the fields sent) and header says
// nothing of it: the replay, written at once, would otherwise get the type net/http sniffs from its
// body, and a replayed clear leaves the field nil, which stops that.
func (cw *captureWriter) untyped(header []headerField, sent http.Header) []headerField {
	if len(sent["Content-Type"]) > 0 || !slices.Contains(cw.cfg.replay, "Content-Type") ||
		slices.ContainsFunc(header, func(f headerField) bool { return f.name == "Content-Type" }) {
		return header
	}
	return append(header, headerField{name: "Content-Type", clear: true})
}

// Hijack hands the connection to the handler; the response cannot be stored then, so the claim
// finishes as a retryable failure. It returns http.ErrNotSupported when the underlying writer
// cannot hijack.
func (cw *captureWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(cw.w).Hijack()
	if err == nil {
		cw.hijacked = true
	}
	return conn, rw, err
}

// commit records the final status and the handler's changes to the headers as they are sent.
func (cw *captureWriter) commit(code int) {
	cw.wrote, cw.status = true, code
	cw.header, cw.encoded = cw.changes()
	h := cw.w.Header()
	cw.declared = declaredLength(h)
	_, typed := h["Content-Type"]
	cw.sniff = !typed && h.Get("Transfer-Encoding") == "" && slices.Contains(cw.cfg.replay, "Content-Type")
}

// declaredLength returns the Content-Length in h as net/http reads it when the status is sent (the
// first value under the canonical name, a non-negative integer), or -1.
func declaredLength(h http.Header) int64 {
	if v := h["Content-Length"]; len(v) > 0 {
		if n, err := strconv.ParseInt(v[0], 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	return -1
}

// cut reports whether the handler wrote less body than the Content-Length it declared: net/http
// then closes the connection mid-response, and what was written is not the whole response.
func (cw *captureWriter) cut() bool {
	return cw.declared >= 0 && !cw.head && bodyAllowed(cw.status) && cw.size < uint64(cw.declared)
}

// settleType stores the Content-Type net/http sniffs for a handler that set none: from the first 512
// bytes written before the first flush (or the end), when there are any. The middleware leaves the
// client's response to net/http, so the client and the replays get the same type.
func (cw *captureWriter) settleType() {
	if !cw.sniff {
		return
	}
	cw.sniff = false
	if len(cw.body) > 0 && bodyAllowed(cw.status) {
		cw.header = append(cw.header, headerField{name: "Content-Type", value: http.DetectContentType(cw.body)})
	}
}

// changes returns the handler's changes to the allow-listed headers so far: the values it added to
// those outer middleware set, or, when it replaced or removed them, a clear followed by its values;
// and whether it set Content-Encoding.
func (cw *captureWriter) changes() (header []headerField, encoded bool) {
	h := cw.w.Header()
	odd := oddKeys(h)
	for _, name := range cw.cfg.replay {
		before := cw.before[name]
		now, _ := fieldValues(h, name, odd)
		switch {
		case slices.Equal(before, now):
			continue
		case len(now) >= len(before) && slices.Equal(before, now[:len(before)]):
			now = now[len(before):]
		default:
			header = append(header, headerField{name: name, clear: true})
		}
		for _, v := range now {
			header = append(header, headerField{name: name, value: sentValue(v)})
		}
	}
	if v, ok := h["Content-Type"]; ok && len(v) == 0 && slices.Contains(cw.cfg.replay, "Content-Type") && !slices.ContainsFunc(header, func(f headerField) bool { return f.name == "Content-Type" && !f.clear }) {
		if _, had := cw.before["Content-Type"]; !had {
			// Suppressed by the handler (set to nil): net/http sends no type and sniffs none, and
			// nor must the replay. A clear with no value after it says so.
			header = append(header, headerField{name: "Content-Type", clear: true})
		}
	}
	ce, _ := fieldValues(h, "Content-Encoding", odd)
	return header, len(ce) > 0 && !slices.Equal(ce, cw.before["Content-Encoding"])
}

// trailers appends to fields the allow-listed trailers the handler set, as net/http sends them once
// the handler returned: the values of the fields the Trailer header declares, and those set with
// http.TrailerPrefix.
func (cw *captureWriter) trailers(fields []headerField) []headerField {
	h := cw.w.Header()
	var names []string // the canonical names of the allow-listed trailers set
	for _, v := range h["Trailer"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name)); len(h[name]) > 0 && slices.Contains(cw.cfg.replay, name) {
				names = append(names, name)
			}
		}
	}
	for key := range h {
		if name, ok := strings.CutPrefix(key, http.TrailerPrefix); ok && slices.Contains(cw.cfg.replay, textproto.CanonicalMIMEHeaderKey(name)) {
			names = append(names, key)
		}
	}
	slices.Sort(names) // a stable stored form
	for _, key := range slices.Compact(names) {
		name := textproto.CanonicalMIMEHeaderKey(strings.TrimPrefix(key, http.TrailerPrefix))
		for _, v := range h[key] {
			fields = append(fields, headerField{name: name, value: sentValue(v), trailer: true})
		}
	}
	return fields
}

// watch returns the body the handler reads (st.bodyFor) and, when it was not read whole by the
// middleware (NoFingerprint), notes the first error reading it: a client that went away mid-body
// makes the handler answer a request cut short (typically 400), which must not be replayed to the
// retry that sends the whole body. An http.MaxBytesError (an outer MaxBytesReader) is no such
// error: the same body meets it again.
func (cw *captureWriter) watch(st *reqState) io.ReadCloser {
	body := st.bodyFor()
	if body == nil || body == http.NoBody || st.bodyDone && st.bodyErr == nil {
		return body
	}
	return &watchedBody{ReadCloser: body, cw: cw}
}

type watchedBody struct {
	io.ReadCloser
	cw *captureWriter
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var mbe *http.MaxBytesError
	if err != nil && err != io.EOF && !errors.As(err, &mbe) {
		b.cw.bodyErr.CompareAndSwap(nil, &err)
	}
	return n, err
}

// result is the guarded function's outcome once the handler, run on ctx, returned: the stored
// response, or an error making the claim retryable when the response is not to be stored.
func (cw *captureWriter) result(ctx context.Context) ([]byte, error) {
	if cw.hijacked {
		return nil, idemkit.Retryable(errHijacked)
	}
	if berr := cw.bodyErr.Load(); berr != nil {
		return nil, idemkit.Retryable(fmt.Errorf("%w: %w", errBodyCut, *berr))
	}
	if !cw.wrote && ctx.Err() != nil {
		// The handler gave up when its context ended (the client went away, an outer
		// http.TimeoutHandler answered, or the Guard's watchdog ended it): it answered nothing, which
		// is not the empty 200 net/http would make of it for a client still there.
		cw.gaveUp = true
		return nil, idemkit.Retryable(fmt.Errorf("%w: %w", errNoResponse, context.Cause(ctx)))
	}
	if !cw.wrote {
		cw.commit(http.StatusOK) // net/http sends 200 for a handler that wrote nothing
	}
	cw.settleType()
	cw.header = cw.trailers(cw.header)
	if !cw.cfg.StorePolicy(cw.status) || cw.cfg.DTM && bytes.Contains(cw.body, []byte(dtmOngoing)) {
		// DTM reads a body saying ONGOING as "ask again later", whatever its status: a stored one
		// would answer every retry DTM makes alike, and the branch would never run again.
		return nil, idemkit.Retryable(&errNotStored{cw.status})
	}
	if cw.cut() && !cw.overflow {
		// The client got a broken response; the body written is not the response to replay. (One
		// too large to store is not replayed anyway, and its writes may have failed because the
		// client went away: it stays recorded as not stored, and is not run again.)
		return nil, idemkit.Retryable(fmt.Errorf("%w: %d of %d bytes", errResponseCut, cw.size, cw.declared))
	}
	if cw.head && (cw.size == 0 || cw.size == uint64(cw.declared)) && cw.declared >= 0 && bodyAllowed(cw.status) &&
		declaredLength(cw.w.Header()) >= 0 {
		// A HEAD's Content-Length is no framing but the size of the body a GET would get (RFC 9110
		// §8.6), sent with no body (net/http discards what a handler writes for a HEAD): what the
		// HEAD asked for, replayed to HEADs (see storedResponse.write).
		cw.header = append(cw.header, headerField{name: "Content-Length", value: strconv.FormatInt(cw.declared, 10)})
	}
	s := storedResponse{status: cw.status, header: cw.header, body: cw.body}
	if len(s.header) > maxStoredFields || slices.ContainsFunc(s.header, func(f headerField) bool { return !validFieldValue([]byte(f.value)) }) {
		// Too many to store, or a value with a control character net/http sent as it is but a
		// replay refuses: the response cannot be replayed faithfully.
		s.header = nil
		s.omitted = true
	}
	if cw.overflow || cw.encoded || s.omitted || cw.cfg.Duplicates == Reject {
		if cw.cfg.DTM && s.status >= 200 && s.status < 300 && bytes.Contains(cw.body, []byte(dtmFailure)) {
			// DTM read this answer as FAILURE: without its body, its duplicates would get 200
			// SUCCESS (see middleware.replay). Recorded as the failure it was, they get 409.
			s.status = http.StatusConflict
		}
		s.body, s.omitted, s.encoded, s.size = nil, true, cw.encoded, cw.size
	}
	return s.encode(), nil
}

// dtmOngoing is the word DTM looks for in a branch's answer to mean "ongoing, ask again later"
// (dtmcli.ResultOngoing), whatever the answer's status.
const dtmOngoing = "ONGOING"

// dtmFailure is the word DTM looks for in a branch's answer to mean FAILURE (dtmcli.ResultFailure),
// whatever the answer's status.
const dtmFailure = "FAILURE"

// sentValue renders a header field value as net/http writes it: CR and LF each become a space, and
// the value is trimmed (see http.Header.Write). Values are stored so: the stored response is what
// the client got, and a replay refuses a value with line breaks.
func sentValue(v string) string {
	if !strings.ContainsAny(v, "\r\n \t") {
		return v
	}
	b := []byte(v)
	for i, c := range b {
		if c == '\r' || c == '\n' {
			b[i] = ' '
		}
	}
	return textproto.TrimString(string(b))
}
