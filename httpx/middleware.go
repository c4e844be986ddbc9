package httpx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/idemkit/idemkit"
)

// Middleware returns net/http middleware (chi's func(http.Handler) http.Handler) that runs each
// guarded request through guard.Do once per (scope, key) and replays the stored response to
// duplicates. See the package documentation for the request flow and the status table, and
// [Options] for the defaults (opts may be nil).
//
// It panics when guard is nil or opts is invalid, and when the returned function is given a nil
// handler; never per request. The middleware is safe for concurrent use.
func Middleware(guard *idemkit.Guard, opts *Options) func(http.Handler) http.Handler {
	mw, err := New(guard, opts)
	if err != nil {
		panic(err)
	}
	return mw
}

// New is [Middleware] returning an error instead of panicking when guard is nil or opts is invalid.
func New(guard *idemkit.Guard, opts *Options) (func(http.Handler) http.Handler, error) {
	if guard == nil {
		return nil, errors.New("httpx: nil Guard")
	}
	cfg, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	// Client keys reach the Guard as they are (without Principal): a key the Guard refuses would be a
	// 400 the client cannot understand, so MaxKeyLen may not exceed the Guard's own limit.
	// The middleware's own keys (tokens, hashed payload and principal keys) and hashed scopes are
	// up to len(idemkit.HashedForm(...)) bytes: a Guard refusing those would refuse them all.
	if gmax := guard.MaxKeyLen(); gmax < len(idemkit.HashedForm("")) {
		return nil, fmt.Errorf("httpx: the Guard's MaxKeyLen %d is below %d, the length of the keys and scopes the middleware derives", gmax, len(idemkit.HashedForm("")))
	}
	if gmax := guard.MaxKeyLen(); cfg.MaxKeyLen > gmax {
		if opts != nil && opts.MaxKeyLen != 0 {
			return nil, fmt.Errorf("httpx: invalid options: MaxKeyLen %d exceeds the Guard's MaxKeyLen %d", cfg.MaxKeyLen, gmax)
		}
		cfg.MaxKeyLen = gmax
	}
	m := &middleware{guard: guard, cfg: cfg}
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("httpx: Middleware: nil handler")
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

type middleware struct {
	guard *idemkit.Guard
	cfg   *config
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	// net/http's ServeMux routes HEAD to a GET pattern's handler, as chi's middleware.GetHead does:
	// on a route whose GET is guarded, an unlisted HEAD would run that handler with no guard.
	headOfGet := r.Method == http.MethodHead && !m.cfg.methods[r.Method] && m.cfg.methods[http.MethodGet]
	if !m.cfg.methods[r.Method] && !headOfGet {
		next.ServeHTTP(w, r)
		return
	}
	outer := stateOf(r) // a middleware of this package around this one, if any
	st := &reqState{cfg: m.cfg, src: r.Body, reqID: m.cfg.RequestID(r), outer: outer}
	if st.reqID != "" && validFieldValue([]byte(st.reqID)) && w.Header().Get(DefaultRequestIDHeader) == "" {
		w.Header().Set(DefaultRequestIDHeader, st.reqID)
	}
	ctx := context.WithValue(r.Context(), stateKey{}, st)
	r = r.WithContext(ctx)
	if headOfGet && ownHead(r, st) {
		next.ServeHTTP(w, r) // not the GET's handler: HEAD is not guarded
		return
	}
	if _, _, unroutable := st.route(r); unroutable && !(headOfGet && routesGET(r)) && !m.carriesKey(r) {
		next.ServeHTTP(w, r) // chi has no route for it and no key is given: its 404 or 405 needs none
		return
	}

	if headOfGet {
		m.headOfGet(w, r, st, next)
		return
	}
	call, p, pass := m.identify(r, st)
	switch {
	case pass:
		r.Body = st.bodyFor()
		next.ServeHTTP(w, r)
		return
	case p.Status != 0 && p.Type == ProblemBodyTooLarge && m.cfg.DTM:
		m.dtmBodyTooLarge(w, r, st, p)
		return
	case p.Status != 0:
		m.problem(w, st, p)
		return
	case outer.holds(m.guard, call):
		// Nested in a middleware already guarding this very call (r.Use on the router, r.With on
		// the route): its claim covers the handler, and a claim of its own would meet it in flight.
		r.Body = st.bodyFor()
		next.ServeHTTP(w, r)
		return
	}

	cw := &captureWriter{w: w, cfg: m.cfg, head: r.Method == http.MethodHead, declared: -1}
	res, err := m.guard.Do(ctx, call, func(ctx context.Context) ([]byte, error) {
		st.guard, st.call = m.guard, call // the claim is held while the handler runs
		cw.start()
		r2 := r.WithContext(ctx) // carries the claim's fence: idemkit.FenceFromContext
		r2.Body = cw.watch(st)
		next.ServeHTTP(cw, r2)
		value, err := cw.result(ctx)
		if err == nil && st.innerInFlight.Load() {
			// A middleware inside answered in flight for a key of its own: retry, not replay.
			return nil, idemkit.Retryable(&errNotStored{cw.status})
		}
		if err == nil && st.tokenIssued.Load() {
			// The response carries a live one-time token: kept nowhere, a retry gets a new one.
			return nil, idemkit.Retryable(errTokenIssued)
		}
		return value, err
	})
	if cw.ran {
		m.afterRun(ctx, st, call.Scope, err)
		if cw.gaveUp && r.Context().Err() == nil {
			// The Guard ended the handler's context, not the client, who is still there: its
			// watchdog (MaxHold ran out, or the lock was lost). Nothing was stored, and net/http
			// would answer the empty 200 of a success: the client is told to retry instead, with
			// none of the fields the handler set for the response it never sent.
			cw.resetHeader()
			m.problem(w, st, problem{Type: ProblemUnavailable, Status: http.StatusServiceUnavailable,
				Detail: "The request was cut short before it was answered; nothing was recorded for this idempotency key: retry it."})
		}
		return
	}
	m.answer(w, r, st, res, err, next)
}

// headOfGet answers a HEAD routed to a handler whose GET is guarded, HEAD being unlisted in Methods:
// with Optional and no key it passes, as the GET would (a caller Options.Principal refuses gets the
// GET's 403); else it is refused (405, Allow: GET), the handler never reached. Guarded as an
// operation of its own it would run the handler again for a key its GET finished, and guarded as the
// GET a HEAD handler's empty body could be stored for the GET's replay: list HEAD in Methods for the
// former.
func (m *middleware) headOfGet(w http.ResponseWriter, r *http.Request, st *reqState, next http.Handler) {
	if m.cfg.Optional {
		if key, err := m.cfg.Key(r); errors.Is(err, ErrKeyMissing) || err == nil && key == "" {
			if m.cfg.Principal != nil {
				if _, err := m.cfg.Principal(r); err != nil {
					m.problem(w, st, m.errorProblem(st, err, ProblemPrincipal, http.StatusForbidden))
					return
				}
			}
			r.Body = st.bodyFor()
			next.ServeHTTP(w, r)
			return
		}
	}
	w.Header().Set("Allow", http.MethodGet)
	m.problem(w, st, problem{Type: ProblemHeadNotGuarded, Status: http.StatusMethodNotAllowed,
		Detail: "HEAD would run this route's GET handler without the idempotency guard its GET has: send GET."})
}

// carriesKey reports whether r gives a key, or one that is malformed. A request chi cannot route by
// its path as sent may still reach a handler: middleware after this one may rewrite the path chi
// routes by (StripSlashes, CleanPath, URLFormat). One with a key is guarded then, its scope its path,
// lest its duplicates run the handler again; one without gets chi's 404 or 405 with no key asked.
func (m *middleware) carriesKey(r *http.Request) bool {
	key, err := m.cfg.Key(r)
	return key != "" || err != nil && !errors.Is(err, ErrKeyMissing)
}

// ownHead reports whether chi routes r, a HEAD, to an endpoint of its own (r.Head): on a path where
// it routes no GET, on another route than the GET's, or with another handler than the GET's. That
// HEAD cannot reach the GET's handler, and passes unguarded as any method not in Methods. A HEAD
// whose handler is the GET's (a route for every method, r.HandleFunc) or may be is refused as any
// HEAD of a guarded GET.
func ownHead(r *http.Request, st *reqState) bool {
	pattern, rctx, unroutable := st.route(r)
	if rctx == nil || rctx.Routes == nil || pattern == "" || unroutable {
		return false
	}
	get, _, unroutable := resolveRouteAs(r, http.MethodGet)
	if unroutable || get != pattern {
		return true
	}
	var gets, heads []http.Handler
	_ = chi.Walk(rctx.Routes, func(method, route string, h http.Handler, _ ...func(http.Handler) http.Handler) error {
		switch {
		case normalPattern(route) != pattern:
		case method == http.MethodGet:
			gets = append(gets, h)
		case method == http.MethodHead:
			heads = append(heads, h)
		}
		return nil
	})
	return len(gets) == 1 && len(heads) == 1 && !sameHandler(gets[0], heads[0])
}

// sameHandler reports whether a and b are, or may be, the same handler value; funcs, which == cannot
// compare, by their code (so two closures of one function literal count as the same).
func sameHandler(a, b http.Handler) bool {
	av, bv := reflect.ValueOf(a), reflect.ValueOf(b)
	switch {
	case av.Type() != bv.Type():
		return false
	case av.Kind() == reflect.Func:
		return av.Pointer() == bv.Pointer()
	case av.Type().Comparable():
		return a == b
	}
	return true
}

// routesGET reports whether chi routes r's path for a GET. A HEAD chi has no route for may yet
// reach the guarded GET's handler: chi's middleware.GetHead placed after this middleware routes it
// there once this one has looked it up (without GetHead chi answers 405, as headOfGet does).
func routesGET(r *http.Request) bool {
	_, _, unroutable := resolveRouteAs(r, http.MethodGet)
	return !unroutable
}

// identify works out the Guard call for r: principal, key, scope and fingerprint. It returns a
// problem to answer with instead, or pass when r goes to the handler unguarded (no key, Optional).
func (m *middleware) identify(r *http.Request, st *reqState) (call idemkit.Call, p problem, pass bool) {
	cfg := m.cfg
	var principal string
	if cfg.Principal != nil {
		var err error
		if principal, err = cfg.Principal(r); err != nil {
			return call, m.errorProblem(st, err, ProblemPrincipal, http.StatusForbidden), false
		}
	}
	key, err := cfg.Key(r)
	if errors.Is(err, ErrKeyMissing) {
		key, err = "", nil
	}
	switch {
	case err != nil:
		if cfg.RunUnguardedOnOutage && errors.Is(err, idemkit.ErrStoreUnavailable) && r.Context().Err() == nil {
			m.log(r.Context(), slog.LevelWarn, "httpx: key source unavailable; running unguarded (RunUnguardedOnOutage)", st, "", err)
			return call, p, true
		}
		return call, m.errorProblem(st, err, ProblemInvalidKey, http.StatusBadRequest), false
	case key == "" && cfg.Optional:
		return call, p, true
	case key == "":
		// The header is named only where the key comes from it: a client told to send a header the
		// route does not read would get this answer again.
		detail := "This operation requires an idempotency key."
		if cfg.headerKey {
			detail = "This operation requires an idempotency key: send it in the " + DefaultHeader + " header."
		}
		return call, problem{Type: ProblemMissingKey, Status: http.StatusBadRequest, Detail: detail}, false
	case len(key) > cfg.MaxKeyLen && key != st.derivedKey: // a bound on client keys, not on derived ones
		return call, problem{Type: ProblemInvalidKey, Status: http.StatusBadRequest,
			Detail: fmt.Sprintf("The idempotency key is %d bytes long; at most %d are allowed.", len(key), cfg.MaxKeyLen)}, false
	case !printable(key):
		return call, problem{Type: ProblemInvalidKey, Status: http.StatusBadRequest,
			Detail: "The idempotency key must be printable UTF-8."}, false
	}
	if cfg.Principal != nil {
		key = PrincipalKey(principal, key)
	}
	if len(key) > m.guard.MaxKeyLen() && (cfg.Principal != nil || key == st.derivedKey) {
		// The principal's prefix took it past the Guard's limit, or a derived key (hashed only
		// past idemkit.MaxStoredLen) is longer than a Guard with a lower limit takes.
		key = idemkit.HashedForm(key)
	}
	scope := cfg.Scope(r)
	if scope == "" {
		m.log(r.Context(), slog.LevelError, "httpx: Options.Scope returned an empty scope", st, "", nil)
		return call, problem{Type: ProblemInternal, Status: http.StatusInternalServerError}, false
	}
	if len(scope) > m.guard.MaxKeyLen() || !printable(scope) {
		scope = idemkit.HashedForm(scope)
	}
	call = idemkit.Call{Scope: scope, Key: key}
	if cfg.NoFingerprint {
		call.Fingerprint = targetFingerprint(r, scope, st) // another target is still another request
	} else {
		body, err := st.loadBody(r)
		if err != nil {
			return call, m.errorProblem(st, err, ProblemBadBody, http.StatusBadRequest), false
		}
		if call.Fingerprint, err = fingerprint(r, scope, body, st); err != nil {
			return call, m.errorProblem(st, err, ProblemBadBody, http.StatusBadRequest), false
		}
	}
	return call, p, false
}

// errorProblem maps an error from a key source, the principal function or the body to a problem;
// def and status are used for errors this package does not know.
func (m *middleware) errorProblem(st *reqState, err error, def string, status int) problem {
	switch {
	case errors.Is(err, ErrBodyTooLarge):
		limit := m.cfg.MaxBodyBytes
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) && mbe.Limit < limit {
			limit = mbe.Limit // an outer http.MaxBytesReader's lower limit
		}
		return problem{Type: ProblemBodyTooLarge, Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("Guarded requests may have bodies of at most %d bytes.", limit)}
	case errors.Is(err, ErrBodyRead):
		return problem{Type: ProblemBadBody, Status: http.StatusBadRequest}
	case errors.Is(err, ErrTokenInvalid):
		return problem{Type: ProblemTokenInvalid, Status: http.StatusConflict}
	case errors.Is(err, ErrPrincipal):
		return problem{Type: ProblemPrincipal, Status: http.StatusForbidden}
	case errors.Is(err, ErrDuplicateMember):
		return problem{Type: ProblemDuplicateMember, Status: http.StatusBadRequest, Detail: duplicateDetail(err)}
	case errors.Is(err, idemkit.ErrStoreUnavailable):
		m.log(context.Background(), slog.LevelWarn, "httpx: store unavailable", st, "", err)
		return problem{Type: ProblemUnavailable, Status: http.StatusServiceUnavailable}
	case errors.Is(err, idemkit.ErrInvalidKey):
		return problem{Type: ProblemInvalidKey, Status: http.StatusBadRequest, Detail: detailOf(err)}
	}
	m.log(context.Background(), slog.LevelDebug, "httpx: request refused", st, "", err)
	return problem{Type: def, Status: status}
}

// duplicateDetail describes a repeated JSON member name to the client.
func duplicateDetail(err error) string {
	var dup *duplicateMemberError
	if !errors.As(err, &dup) {
		return "The JSON body repeats a member name in one object; send each name once."
	}
	return fmt.Sprintf("The JSON body repeats the member name %s in one object (again at byte %d). "+
		"Send each name once: with a repeated name the request is ambiguous, so it cannot be checked against the idempotency key.",
		dup.quoted(), dup.offset)
}

// detailOf is a client-safe description of an invalid key error (it never echoes the key).
func detailOf(err error) string {
	var kc *keyCaseError
	switch {
	case errors.As(err, &kc):
		return fmt.Sprintf("The JSON body's member %s differs only in case from the key field %s: member names are case-sensitive, "+
			"and a decoder that folds case would read the request's key from another member. Name the key field exactly %s, once.",
			strconv.Quote(kc.name), strconv.Quote(kc.path), strconv.Quote(kc.path))
	case errors.Is(err, errMultipleKeys):
		return "The idempotency key was given more than once."
	case errors.Is(err, errKeyEmpty):
		return "The idempotency key was given empty: send a non-empty key."
	case errors.Is(err, errHeaderSyntax):
		return "The idempotency key header is malformed: send a Structured Field String such as \"8e03978e-40d5-43e8-bc93-6894a57f9324\"."
	}
	return "The idempotency key is malformed."
}

// answer responds for a guarded request whose handler did not run.
func (m *middleware) answer(w http.ResponseWriter, r *http.Request, st *reqState, res idemkit.Result, err error, next http.Handler) {
	var rejected *idemkit.RejectedError
	var inFlight *idemkit.InFlightError
	switch {
	case err == nil && res.Replayed, errors.As(err, &rejected) && len(res.Value) > 0:
		m.replay(w, r, st, res.Value)
	case rejected != nil:
		m.problem(w, st, problem{Type: ProblemRejected, Status: http.StatusConflict})
	case errors.As(err, &inFlight), errors.Is(err, idemkit.ErrInFlight):
		for o := st.outer; o != nil; o = o.outer {
			o.innerInFlight.Store(true) // not the response of a middleware around this one
		}
		secs := retryAfterSeconds(inFlight, m.cfg.InFlightRetryAfter)
		status := http.StatusConflict
		if m.cfg.DTM {
			status = http.StatusTooEarly
		}
		m.problem(w, st, problem{Type: ProblemInFlight, Status: status, RetryAfter: secs,
			Detail: "A request with this idempotency key is being processed; retry later."})
	case errors.Is(err, idemkit.ErrPayloadMismatch):
		m.problem(w, st, problem{Type: ProblemPayloadMismatch, Status: http.StatusUnprocessableEntity,
			Detail: "This idempotency key was first used with a different request; use a new key for a new request."})
	case errors.Is(err, idemkit.ErrInvalidKey):
		m.problem(w, st, problem{Type: ProblemInvalidKey, Status: http.StatusBadRequest})
	case errors.Is(err, idemkit.ErrDuplicate):
		m.problem(w, st, problem{Type: ProblemDuplicate, Status: http.StatusConflict})
	case errors.Is(err, idemkit.ErrStoreUnavailable), errors.Is(err, idemkit.ErrLockUnavailable):
		// Not when the request's own context ended (the client went away before the lock or the
		// record answered): that is no outage, and its retry must find the key guarded.
		if m.cfg.RunUnguardedOnOutage && r.Context().Err() == nil {
			m.log(r.Context(), slog.LevelWarn, "httpx: store unavailable; running unguarded (RunUnguardedOnOutage)", st, "", err)
			r.Body = st.bodyFor()
			next.ServeHTTP(w, r)
			return
		}
		m.log(r.Context(), slog.LevelWarn, "httpx: store unavailable", st, "", err)
		m.problem(w, st, problem{Type: ProblemUnavailable, Status: http.StatusServiceUnavailable})
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		m.problem(w, st, problem{Type: ProblemUnavailable, Status: http.StatusServiceUnavailable})
	default:
		m.log(r.Context(), slog.LevelError, "httpx: unexpected guard result", st, "", err)
		m.problem(w, st, problem{Type: ProblemInternal, Status: http.StatusInternalServerError})
	}
}

// retryAfterSeconds is the Retry-After of an in-flight answer: the holder's remaining time when
// known, at most limit, in whole seconds rounded up, at least 1.
func retryAfterSeconds(inFlight *idemkit.InFlightError, limit time.Duration) int {
	d := limit
	if inFlight != nil && inFlight.RetryAfter > 0 {
		d = min(d, inFlight.RetryAfter)
	}
	return max(1, int((d+time.Second-1)/time.Second))
}

// replay answers with a stored response, or the problem standing for it.
func (m *middleware) replay(w http.ResponseWriter, r *http.Request, st *reqState, value []byte) {
	s, err := decodeResponse(value)
	switch {
	case err != nil:
		m.log(r.Context(), slog.LevelError, "httpx: stored response unreadable", st, "", err)
		m.problem(w, st, problem{Type: ProblemInternal, Status: http.StatusInternalServerError,
			Detail: "The request was processed before, but its stored response cannot be read."})
	case m.cfg.DTM && (m.cfg.Duplicates == Reject || s.omitted) && s.status >= 200 && s.status < 300:
		// DTM reads 409 as FAILURE and would roll back a branch that succeeded: tell it so.
		w.Header().Set(ReplayedHeader, "true")
		writeDTMSuccess(w)
	case m.cfg.Duplicates == Reject:
		m.problem(w, st, problem{Type: ProblemDuplicate, Status: m.unreplayedStatus(s.status), OriginalStatus: s.status,
			Detail: "A request with this idempotency key was already processed."})
	case s.omitted && s.encoded:
		m.problem(w, st, problem{Type: ProblemResponseNotStored, Status: m.unreplayedStatus(s.status), OriginalStatus: s.status,
			Detail: "A request with this idempotency key was processed, but its response was not stored: the handler encoded its body (Content-Encoding), and encodings are never replayed."})
	case s.omitted && s.size > uint64(m.cfg.MaxResponseBytes):
		m.problem(w, st, problem{Type: ProblemResponseNotStored, Status: m.unreplayedStatus(s.status), OriginalStatus: s.status,
			Detail: fmt.Sprintf("A request with this idempotency key was processed, but its response was too large to store (%d bytes; the limit is %d bytes).", s.size, m.cfg.MaxResponseBytes)})
	case s.omitted:
		// Within the limit: its header fields could not be replayed faithfully (see captureWriter.result).
		m.problem(w, st, problem{Type: ProblemResponseNotStored, Status: m.unreplayedStatus(s.status), OriginalStatus: s.status,
			Detail: "A request with this idempotency key was processed, but its response was not stored: the header fields it set (more than 256, or a value with a control character) cannot be replayed."})
	default:
		s.write(w, r.Method == http.MethodHead)
	}
}

// unreplayedStatus is the status of the problem answering a duplicate whose stored response is not
// replayed (Reject, or not stored): 409, or with Options.DTM the original status (2xx answer
// SUCCESS before), since DTM acts on the status alone and reads 409 as FAILURE — a branch first
// answered 400 (DTM retries) must not be rolled back by its duplicate.
func (m *middleware) unreplayedStatus(original int) int {
	if m.cfg.DTM {
		return original
	}
	return http.StatusConflict
}

// afterRun logs what went wrong after the handler ran; its response already went to the client.
func (m *middleware) afterRun(ctx context.Context, st *reqState, scope string, err error) {
	var ns *errNotStored
	switch {
	case err == nil, errors.As(err, &ns), errors.Is(err, errHijacked), errors.Is(err, errBodyCut), errors.Is(err, errNoResponse),
		errors.Is(err, errTokenIssued):
	case errors.Is(err, errResponseCut):
		m.log(ctx, slog.LevelWarn, "httpx: the handler's response was cut short; not stored, a retry runs again", st, scope, err)
	case errors.Is(err, idemkit.ErrFenced):
		m.log(ctx, slog.LevelWarn, "httpx: response sent but not recorded: the record is no longer this attempt's", st, scope, err)
	case errors.Is(err, idemkit.ErrUnstorable) && !errors.Is(err, idemkit.ErrStoreUnavailable):
		// The Guard recorded the key finished without the response (REJECTED, never run again):
		// within MaxResponseBytes, but more than the record store's column holds.
		m.log(ctx, slog.LevelWarn, "httpx: response sent but too large for the record store: the key is recorded without it, and duplicates get 409 rejected (lower MaxResponseBytes)", st, scope, err)
	default:
		m.log(ctx, slog.LevelWarn, "httpx: response sent but its outcome not recorded; a retry after the lease may run again", st, scope, err)
	}
}

func (m *middleware) problem(w http.ResponseWriter, st *reqState, p problem) {
	p.RequestID = st.reqID
	writeProblem(w, m.cfg, p)
}

func (m *middleware) log(ctx context.Context, level slog.Level, msg string, st *reqState, scope string, err error) {
	if !m.cfg.Logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 3)
	if st.reqID != "" {
		attrs = append(attrs, slog.String("request_id", st.reqID))
	}
	if scope != "" {
		attrs = append(attrs, slog.String("scope", scope))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	m.cfg.Logger.LogAttrs(ctx, level, msg, attrs...)
}
