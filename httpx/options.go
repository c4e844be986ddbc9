package httpx

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"time"
)

// Defaults of [Options].
const (
	// DefaultHeader is the request header carrying the idempotency key (the IETF draft's field).
	DefaultHeader = "Idempotency-Key"
	// DefaultRequestIDHeader is read for the request ID and echoed on responses.
	DefaultRequestIDHeader = "X-Request-Id"
	// DefaultMaxKeyLen is the longest key accepted from a client, in bytes (as Stripe).
	DefaultMaxKeyLen = 255
	// DefaultMaxBodyBytes is the largest request body read for fingerprints and key fields.
	DefaultMaxBodyBytes int64 = 1 << 20
	// DefaultMaxResponseBytes is the largest response body stored for replay.
	DefaultMaxResponseBytes = 1 << 20
	// DefaultInFlightRetryAfter is the longest Retry-After an in-flight answer gives: a duplicate
	// usually arrives while the first request is about to finish, so a short hint serves clients
	// best; the holder's lease (30 s by default) only bounds how long it may take.
	DefaultInFlightRetryAfter = time.Second
	// DefaultProblemBase prefixes the problem type names (see [ProblemMissingKey] and the rest) to
	// form the "type" URI of problem+json bodies; it points at the documentation of each type.
	DefaultProblemBase = "https://github.com/idemkit/idemkit/blob/main/httpx/README.md#"
	// ReplayedHeader is set to "true" on every replayed response.
	ReplayedHeader = "Idempotent-Replayed"
)

// DuplicatePolicy says what a duplicate of a finished request gets.
type DuplicatePolicy uint8

const (
	// Replay answers a duplicate with the stored response (status, allow-listed headers, body) and
	// Idempotent-Replayed: true. The default.
	Replay DuplicatePolicy = iota
	// Reject answers a duplicate with 409 problem+json "duplicate request" (the seed's "throw"). Only
	// the status is stored, not the body.
	Reject
)

// DefaultMethods returns the methods guarded by default: POST and PATCH, the non-idempotent methods
// the IETF draft names. PUT and DELETE are idempotent by definition (RFC 9110, 9.2.2) and, as at
// Stripe, pass through unless listed in [Options.Methods]. Safe methods (GET, HEAD, OPTIONS,
// TRACE) pass through unless listed.
func DefaultMethods() []string { return []string{http.MethodPost, http.MethodPatch} }

// DefaultReplayHeaders returns the response headers stored and replayed by default. Append to it to
// keep more. Only what the handler itself set is stored: values already on the response when the
// handler ran (set by outer middleware) and values added after it sent the status are not.
// X-Content-Type-Options is among them because http.Error sets it (nosniff) on the error it writes,
// and Accept-Patch because RFC 5789 asks it of a 415 to a PATCH.
func DefaultReplayHeaders() []string {
	return []string{
		"Accept-Patch", "Accept-Ranges", "Allow", "Cache-Control", "Content-Disposition", "Content-Language",
		"Content-Location", "Content-Range", "Content-Type", "Etag", "Expires", "Last-Modified", "Link", "Location",
		"Retry-After", "Vary", "X-Content-Type-Options",
	}
}

// statusClientClosed is 499 Client Closed Request: not in RFC 9110, but the status nginx logs for a
// request whose client went away and grpc-gateway answers for a handler's codes.Canceled.
const statusClientClosed = 499

// neverReplayed holds headers never stored or replayed whatever Options.ReplayHeaders says:
// credentials, cookies, hop-by-hop fields (and every Proxy-* field, see neverStored), framing and
// encoding (the stored body is what the handler wrote, before any outer middleware encoded it), and
// the fields the middleware sets itself.
var neverReplayed = map[string]bool{
	"Set-Cookie": true, "Set-Cookie2": true, "Authorization": true, "Www-Authenticate": true,
	"Connection": true, "Keep-Alive": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true,
	"Content-Encoding": true, "Content-Length": true, "Date": true, "Idempotent-Replayed": true,
}

// neverStored reports whether the header with the canonical name is never stored or replayed.
func neverStored(name string) bool {
	return neverReplayed[name] || strings.HasPrefix(name, "Proxy-")
}

// DefaultStorePolicy reports whether a response with status is stored and replayed: 2xx, 3xx and
// 4xx except 401 Unauthorized, 408 Request Timeout, 425 Too Early, 429 Too Many Requests and 499
// Client Closed Request. 5xx (and anything else) releases the claim as a retryable failure so the
// next retry runs again. 401 is not stored because the same request with fresh credentials may
// succeed (grpcx treats UNAUTHENTICATED alike); 403, a refusal of the caller as authenticated, is.
// 408, 425 and 429 ask the client to retry later (425 is DTM's "ongoing"): a stored one would answer
// every retry alike. 499 (nginx's, and grpc-gateway's for a cancelled call) answers a client that
// went away: no client reads it, and the retry that client sends must run (grpcx leaves a CANCELED
// handler's key free alike).
func DefaultStorePolicy(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests,
		statusClientClosed:
		return false
	}
	return status >= 200 && status < 500
}

// Options configure [Middleware]. The zero value works: the Idempotency-Key header is required on
// POST and PATCH, the scope is the method and route, the body is fingerprinted, responses are
// replayed, store errors answer 503. Requests chi cannot route that give no key pass through to
// chi's 404 or 405 (one giving a key is guarded, its scope its path: middleware after this one may
// rewrite the path chi routes by).
// Middleware copies the struct; later changes have no effect.
type Options struct {
	// Key derives the idempotency key of a request. Defaults to Header(DefaultHeader). Compose
	// sources with [FirstOf] and [All].
	Key KeySource
	// Methods are the guarded methods; others pass through untouched. Defaults to [DefaultMethods]
	// (POST, PATCH). One exception: when GET is listed and HEAD is not, a HEAD (which net/http's
	// ServeMux and chi's middleware.GetHead route to the GET handler) is answered 405
	// head-not-guarded and the handler does not run, unless Optional lets it pass without a key as
	// the GET would, or chi routes it to a HEAD handler of its own (r.Head, with another handler than
	// the GET's): that passes, unguarded. Listed, HEAD is an operation of its own: its scope and
	// fingerprint name HEAD.
	Methods []string
	// Optional lets guarded requests without a key pass through unguarded instead of failing with
	// 400. A key given empty (an empty header, or query parameter with [Query]) is no missing key but
	// an invalid one, 400 either way. Defaults to false: the key is required.
	Optional bool
	// Scope names the operation a key belongs to. Defaults to [DefaultScope]: the method and the chi
	// route pattern, else the net/http pattern, else the path. The scope is part of the stored key:
	// a deploy that edits a route's pattern (a parameter renamed, a regexp added, the route mounted
	// elsewhere) starts a new scope, and a retry of a key finished before it runs the handler again;
	// a Scope naming the operation stably avoids that.
	Scope func(r *http.Request) string
	// Principal returns the caller (user, tenant) a key belongs to; it becomes part of the stored
	// key, so one principal can never replay another's response. Return "" for an anonymous caller
	// (anonymous callers share one key space) or an error to refuse the request with 403.
	// Defaults to none: keys are shared by all callers of a scope.
	Principal func(r *http.Request) (string, error)
	// Noise lists fields ignored by fingerprints and derived keys: a name without a dot ("nonce")
	// matches a JSON member of that name at any depth and a query parameter of that name; a dotted
	// path ("meta.sentAt") matches from the root of the JSON body, through arrays. Defaults to none.
	Noise []string
	// NoFingerprint turns the payload check off: a reused key with another body is replayed rather
	// than refused with 422, and the body is read only when a key source needs it. The target is
	// still checked: the key sent with another path (another order of the route's pattern) or
	// another query (noise parameters aside) gets 422. Defaults to false.
	NoFingerprint bool
	// MaxKeyLen is the longest key accepted from a client, in bytes; longer keys get 400. It bounds
	// what clients send, not the keys the middleware derives (JSONFields, All, Tokens.Key: hashed or
	// fixed-length). Defaults to DefaultMaxKeyLen (255), or the Guard's Options.MaxKeyLen when that is
	// smaller; New refuses a value above the Guard's (the Guard would refuse such keys itself).
	MaxKeyLen int
	// MaxBodyBytes bounds the request body read for fingerprints and key fields; larger bodies get
	// 413. Defaults to DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// MaxResponseBytes bounds the response body stored. A larger response still reaches its client
	// in full and the claim finishes SUCCEEDED, but duplicates get 409 problem "response-not-stored"
	// instead of a truncated body. Defaults to DefaultMaxResponseBytes (1 MiB). Keep it within what
	// the record store holds (package record on MariaDB/MySQL: 16 MiB with the status and headers):
	// a stored response the store refuses is recorded without it, REJECTED, and duplicates get 409
	// problem "rejected".
	MaxResponseBytes int
	// StorePolicy reports whether a response status is stored and replayed; for other statuses the
	// response goes to the client and the claim finishes as a retryable failure. Defaults to
	// [DefaultStorePolicy] (2xx–4xx except 401, 408, 425, 429 and 499).
	StorePolicy func(status int) bool
	// ReplayHeaders are the response headers stored and replayed, besides status and body; only
	// the values the handler set are stored, not those outer middleware put on the response. A
	// listed name the handler sends as a trailer (declared in the Trailer header and set after the
	// body, or set with http.TrailerPrefix) is stored and replayed as a trailer.
	// Set-Cookie, Authorization, hop-by-hop (Connection, Keep-Alive, Proxy-*, TE, Trailer,
	// Transfer-Encoding, Upgrade), framing and encoding (Content-Length, Content-Encoding) headers
	// are never stored and may not be listed. Defaults to [DefaultReplayHeaders].
	ReplayHeaders []string
	// Duplicates says what a duplicate of a finished request gets. Defaults to Replay.
	Duplicates DuplicatePolicy
	// DTM answers requests whose key is in flight with 425 Too Early, which the DTM transaction
	// manager reads as "ongoing, retry later", instead of 409. Set it on DTM branch routes. A
	// duplicate of a branch that succeeded (2xx) but cannot be replayed — Duplicates is Reject, or the
	// response was too large to store — gets 200 {"dtm_result":"SUCCESS"} instead of 409, which DTM
	// would read as FAILURE, and one of another status gets its problem with that status (a 400,
	// which DTM retries, stays 400). DTM calls a branch whose payload is empty with GET, which
	// Methods does not guard by default: list http.MethodGet in Methods on such routes (package
	// dtmhttp's handlers guard every method DTM uses). net/http's ServeMux also routes HEAD to a GET
	// pattern's handler: see Methods. A handler's answer whose body (within MaxResponseBytes)
	// contains ONGOING, which DTM reads as "ongoing" whatever the status (200
	// {"dtm_result":"ONGOING"}), is not stored, as a 425 is not: DTM's retry runs the handler again.
	// A 2xx whose body contains FAILURE, which DTM reads as a failure, is recorded as a 409 when its
	// body is not stored (Duplicates is Reject), so its duplicates get 409, never 200 SUCCESS.
	// A body over MaxBodyBytes, which DTM sends unchanged on every call of the branch, is answered
	// by the op DTM names in the query (as package dtmhttp answers a payload over its MaxBody): a
	// saga's action or a TCC's try fails (409: the saga rolls back, the TCC aborts), a compensate,
	// cancel or rollback has nothing to undo (200 {"dtm_result":"SUCCESS"}: the op it undoes carried
	// the same payload and was refused alike — give the routes of a branch's ops the same
	// MaxBodyBytes), a confirm, commit or msg action stays 413, logged at error level (DTM retries
	// it). A request whose query does not name its trans_type, gid, branch_id and op gets 413.
	// Defaults to false.
	DTM bool
	// InFlightRetryAfter bounds the Retry-After header (and the problem's retryAfter member) of
	// an in-flight answer. The hint is the time the holder may still hold the key when the Guard
	// knows it (the remaining lock or lease), capped at this value, rounded up to whole seconds
	// (the header's unit) and at least 1. Defaults to DefaultInFlightRetryAfter (1 s); negative is
	// invalid.
	InFlightRetryAfter time.Duration
	// RunUnguardedOnOutage runs the handler WITHOUT ANY IDEMPOTENCY GUARD when the record store,
	// the lock or a key source's store (tokens) fails before the handler ran
	// (idemkit.ErrStoreUnavailable, idemkit.ErrLockUnavailable). DANGER: during such an outage
	// every retry executes again, so a payment may be taken twice. Choose it only for endpoints
	// where a duplicate is cheaper than an error. Unlike idemkit.Options.FailOpen, which only
	// skips Redis while the database still guards every call, nothing guards the request here.
	// Defaults to false: 503 problem+json.
	RunUnguardedOnOutage bool
	// RequestID returns the request ID, attached to logs, put in the context (see [RequestID]) and
	// echoed in the X-Request-Id response header. It is never part of a key or a lock owner.
	// Defaults to the X-Request-Id request header. With chi's middleware.RequestID use
	// func(r *http.Request) string { return middleware.GetReqID(r.Context()) }.
	RequestID func(r *http.Request) string
	// ProblemBase prefixes problem type names to form the "type" member of problem+json bodies.
	// Defaults to DefaultProblemBase.
	ProblemBase string
	// Logger receives warnings (store failures after the handler ran, fenced finishes, unguarded
	// runs under RunUnguardedOnOutage). Defaults to discarding.
	Logger *slog.Logger
}

// config is Options with defaults applied and lookups precomputed.
type config struct {
	Options
	methods map[string]bool
	replay  []string // canonical header names, sorted
	noise   *noiseSet
	// headerKey: the key comes from the Idempotency-Key header (Options.Key left nil), which the
	// missing-key answer may name.
	headerKey bool
}

func (o *Options) withDefaults() (*config, error) {
	c := &config{}
	if o != nil {
		c.Options = *o
	}
	if c.Key == nil {
		c.Key, c.headerKey = Header(DefaultHeader), true
	}
	if c.Methods == nil {
		c.Methods = DefaultMethods()
	}
	if c.Scope == nil {
		c.Scope = DefaultScope
	}
	c.MaxKeyLen = cmp.Or(c.MaxKeyLen, DefaultMaxKeyLen)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.MaxResponseBytes = cmp.Or(c.MaxResponseBytes, DefaultMaxResponseBytes)
	c.InFlightRetryAfter = cmp.Or(c.InFlightRetryAfter, DefaultInFlightRetryAfter)
	if c.StorePolicy == nil {
		c.StorePolicy = DefaultStorePolicy
	}
	if c.ReplayHeaders == nil {
		c.ReplayHeaders = DefaultReplayHeaders()
	}
	if c.RequestID == nil {
		c.RequestID = headerRequestID
	}
	c.ProblemBase = cmp.Or(c.ProblemBase, DefaultProblemBase)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}

	var errs []error
	if len(c.Methods) == 0 {
		errs = append(errs, errors.New("Methods must not be empty (leave it nil for the default)"))
	}
	c.methods = make(map[string]bool, len(c.Methods))
	for _, m := range c.Methods {
		if m == "" || strings.ToUpper(m) != m || !isToken(m) {
			errs = append(errs, fmt.Errorf("Methods: %q is not an upper-case method token", m))
		}
		c.methods[m] = true
	}
	if c.MaxKeyLen < 1 {
		errs = append(errs, fmt.Errorf("MaxKeyLen must be positive, got %d", c.MaxKeyLen))
	}
	if c.MaxBodyBytes < 1 {
		errs = append(errs, fmt.Errorf("MaxBodyBytes must be positive, got %d", c.MaxBodyBytes))
	}
	if c.MaxResponseBytes < 1 {
		errs = append(errs, fmt.Errorf("MaxResponseBytes must be positive, got %d", c.MaxResponseBytes))
	}
	if c.InFlightRetryAfter < 0 {
		errs = append(errs, fmt.Errorf("InFlightRetryAfter must not be negative, got %s", c.InFlightRetryAfter))
	}
	if c.Duplicates > Reject {
		errs = append(errs, fmt.Errorf("Duplicates: unknown policy %d", c.Duplicates))
	}
	for _, h := range c.ReplayHeaders {
		name := textproto.CanonicalMIMEHeaderKey(h)
		switch {
		case !isToken(h):
			errs = append(errs, fmt.Errorf("ReplayHeaders: %q is not a header name", h))
		case neverStored(name):
			errs = append(errs, fmt.Errorf("ReplayHeaders: %s is never replayed", name))
		case !slices.Contains(c.replay, name):
			c.replay = append(c.replay, name)
		}
	}
	slices.Sort(c.replay)
	ns, err := newNoiseSet(c.Noise)
	if err != nil {
		errs = append(errs, err)
	}
	c.noise = ns
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("httpx: invalid options: %w", err)
	}
	return c, nil
}

func headerRequestID(r *http.Request) string { return r.Header.Get(DefaultRequestIDHeader) }

// isToken reports whether s is a non-empty RFC 9110 token (method and header names).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
