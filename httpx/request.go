package httpx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/go-chi/chi/v5"
	"github.com/idemkit/idemkit"
)

// reqState is what the middleware knows about one guarded request. Key sources and the scope
// function find it in the request context; it is used by one goroutine at a time.
type reqState struct {
	cfg      *config
	src      io.ReadCloser // the original body
	reqID    string
	bodyDone bool
	body     []byte
	bodyErr  error
	consumed []byte // with bodyErr: what was read of the original before the error
	// content is what the body carries, once worked out (contentDone): what it decodes to when it
	// is a gzip body (encoded), else body. Key fields and fingerprints are taken from it.
	contentDone bool
	content     []byte
	encoded     bool
	jsonDone    bool
	doc         any
	docOK       bool
	canonDone   bool
	canon       []byte // the body's canonical JSON without noise, when canonErr is nil
	canonErr    error  // errNotJSON, or an ErrDuplicateMember error
	canonLossy  bool   // decoding replaced an invalid byte or an unpaired surrogate with U+FFFD
	routeDone   bool
	pattern     string
	rctx        *chi.Context
	unroutable  bool
	// derivedKey is the last key a deriving source (JSONFields, All, Tokens.Key) produced: the
	// middleware made it, so Options.MaxKeyLen (a bound on what clients send) does not apply to it.
	derivedKey string
	// guard and call: the claim under which the handler runs, once the middleware holds it.
	guard *idemkit.Guard
	call  idemkit.Call
	// outer is the state of a middleware of this package around this one, if any.
	outer *reqState
	// spent is the one-time token a Tokens.Key consumed for this request, if any: a middleware
	// nested in this one reads the key again and must find it, not consume the token twice.
	spent *spentToken
	// innerInFlight: a middleware of this package nested in this one answered in flight for its
	// own key: a transient answer, not this key's response to store. Atomic: the handler chain may
	// run on a goroutine the middleware does not wait for (an http.TimeoutHandler between them).
	innerInFlight atomic.Bool
	// tokenIssued: Tokens.Handler answered this request with a one-time token, which is stored
	// nowhere (only token hashes are): not the response to store. Atomic, as innerInFlight.
	tokenIssued atomic.Bool
}

// spentToken is a one-time token consumed for a request, and the key it gave.
type spentToken struct {
	tokens *Tokens
	id     string // tokenID of the token
	key    string
}

// spentKey returns the key of the token with id that tokens consumed for this request, in this
// middleware or one around it.
func (st *reqState) spentKey(tokens *Tokens, id string) (string, bool) {
	for s := st; s != nil; s = s.outer {
		if s.spent != nil && s.spent.tokens == tokens && s.spent.id == id {
			return s.spent.key, true
		}
	}
	return "", false
}

// holds reports whether the middleware of st, or one around it, runs its handler under a claim of
// guard on the scope and key of c. st may be nil (no middleware around).
func (st *reqState) holds(guard *idemkit.Guard, c idemkit.Call) bool {
	for s := st; s != nil; s = s.outer {
		if s.guard == guard && s.call.Scope == c.Scope && s.call.Key == c.Key {
			return true
		}
	}
	return false
}

// markDerived notes that key was derived by the middleware rather than sent by the client.
func markDerived(r *http.Request, key string) string {
	if st := stateOf(r); st != nil {
		st.derivedKey = key
	}
	return key
}

type stateKey struct{}

func stateOf(r *http.Request) *reqState {
	st, _ := r.Context().Value(stateKey{}).(*reqState)
	return st
}

// RequestID returns the request ID of a request handled by the middleware (see
// [Options.RequestID]), or "".
func RequestID(ctx context.Context) string {
	if st, ok := ctx.Value(stateKey{}).(*reqState); ok {
		return st.reqID
	}
	return ""
}

// loadBody reads the body once, up to the limit.
func (st *reqState) loadBody(r *http.Request) ([]byte, error) {
	if st.bodyDone {
		return st.body, st.bodyErr
	}
	st.bodyDone = true
	limit := st.cfg.MaxBodyBytes
	switch {
	case st.src == nil || st.src == http.NoBody:
		return nil, nil
	case r.ContentLength > limit:
		st.bodyErr = fmt.Errorf("%w: %d bytes, limit %d", ErrBodyTooLarge, r.ContentLength, limit)
		return nil, st.bodyErr
	}
	body, err := readLimited(st.src, r.ContentLength, limit)
	if err != nil {
		st.consumed = body
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, ErrBodyTooLarge):
		st.bodyErr = fmt.Errorf("%w: limit %d", ErrBodyTooLarge, limit)
	case errors.As(err, &mbe): // an outer http.MaxBytesReader's lower limit
		st.bodyErr = fmt.Errorf("%w: %w", ErrBodyTooLarge, err)
	case err != nil:
		st.bodyErr = fmt.Errorf("%w: %w", ErrBodyRead, err)
	default:
		st.body = body
	}
	return st.body, st.bodyErr
}

// readLimited reads src to the end, at most limit bytes, into one buffer sized by the declared
// length when there is one. It returns ErrBodyTooLarge past the limit; with an error, the bytes read
// until then.
func readLimited(src io.Reader, declared, limit int64) ([]byte, error) {
	room := limit // the most bytes read: one past limit, to see a body exceed it
	if room < math.MaxInt64 {
		room++
	}
	size := int64(512)
	if declared >= 0 && declared < room {
		size = declared + 1 // +1 to see EOF without growing
	}
	buf := make([]byte, 0, min(size, room))
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return buf, ErrBodyTooLarge
			}
			buf = slices.Grow(buf, int(min(int64(cap(buf)), room-int64(len(buf)))))
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return buf, ErrBodyTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// payload returns what body, the loaded body of r, carries: what it decodes to when it is a whole
// gzip stream sent with Content-Encoding gzip (encoded; see gunzipped), else body itself. It is
// worked out once, and canonical works on it: a client compressing its JSON request still has its
// key fields read and its noise removed.
func (st *reqState) payload(r *http.Request, body []byte) (content []byte, encoded bool) {
	if !st.contentDone {
		st.contentDone = true
		st.content, st.encoded = gunzipped(r.Header, body, st.cfg.MaxBodyBytes)
		if !st.encoded {
			st.content = body
		}
	}
	return st.content, st.encoded
}

// canonical returns the canonical form of the body's payload (see payload and canonicalize),
// computed once, after payload.
func (st *reqState) canonical() ([]byte, error) {
	if !st.canonDone {
		st.canonDone = true
		st.canon, st.canonLossy, st.canonErr = canonicalizeLossy(make([]byte, 0, len(st.content)), st.content, st.cfg.noise)
	}
	return st.canon, st.canonErr
}

// json returns the body's payload (a gzip body decoded) parsed as JSON, once: ok is false when it is
// not JSON. A JSON body that repeats a member name is an error matching ErrDuplicateMember.
func (st *reqState) json(r *http.Request) (any, bool, error) {
	if st.jsonDone {
		return st.doc, st.docOK, nil
	}
	body, err := st.loadBody(r)
	if err != nil {
		return nil, false, err
	}
	body, _ = st.payload(r, body)
	if len(body) > 0 {
		if _, err := st.canonical(); errors.Is(err, ErrDuplicateMember) {
			return nil, false, err
		}
	}
	st.jsonDone = true
	if len(body) > 0 {
		st.doc, st.docOK = decodeJSON(body)
	}
	return st.doc, st.docOK, nil
}

// route resolves the chi route once (see resolveRoute).
func (st *reqState) route(r *http.Request) (string, *chi.Context, bool) {
	if !st.routeDone {
		st.routeDone = true
		st.pattern, st.rctx, st.unroutable = resolveRoute(r)
	}
	return st.pattern, st.rctx, st.unroutable
}

// bodyFor returns the body the handler reads: the buffered bytes when the middleware read them,
// else the original, untouched; when reading it failed (past MaxBodyBytes, a broken connection),
// what was read of it followed by the rest of the original, so the handler reads the whole body, or
// meets the error itself.
func (st *reqState) bodyFor() io.ReadCloser {
	switch {
	case !st.bodyDone || st.src == nil || st.src == http.NoBody:
		return st.src
	case st.bodyErr != nil:
		return struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(st.consumed), st.src), st.src}
	}
	return io.NopCloser(bytes.NewReader(st.body))
}

// Body returns the request body as read by the middleware, for custom key sources and scope
// functions; the handler still reads the whole body afterwards. Outside the middleware it reads the
// body (up to DefaultMaxBodyBytes) and puts it back, also when it returns an error: r.Body then
// holds what was read followed by the rest. It returns ErrBodyTooLarge or ErrBodyRead.
func Body(r *http.Request) ([]byte, error) {
	if st := stateOf(r); st != nil {
		return st.loadBody(r)
	}
	st := &reqState{cfg: &config{Options: Options{MaxBodyBytes: DefaultMaxBodyBytes}}, src: r.Body}
	b, err := st.loadBody(r)
	r.Body = st.bodyFor()
	return b, err
}
