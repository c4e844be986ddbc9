// Package httpx makes HTTP endpoints idempotent: net/http and chi middleware implementing the IETF
// draft "The Idempotency-Key HTTP Header Field" with Stripe's semantics, on top of an
// [idemkit.Guard].
//
//	guard, err := idemkit.New(store, &idemkit.Options{Locker: locker})
//	if err != nil {
//		return err
//	}
//	r := chi.NewRouter()
//	r.Use(httpx.Middleware(guard, nil)) // every POST and PATCH now needs an Idempotency-Key
//
// The package README and the examples (ExampleMiddleware_production) show the whole wiring.
//
// # Request flow
//
// Requests whose method is not guarded (by default all but POST and PATCH) pass through untouched.
// For a guarded request the middleware
//
//  1. identifies the caller with Options.Principal, if set;
//  2. derives the key from Options.Key (by default the Idempotency-Key header, a Structured Field
//     String or a bare value) and puts the principal in front of it, so one principal can never
//     replay another's response;
//  3. computes the scope (by default the method and the chi route pattern) and a fingerprint:
//     SHA-256 over method, scope, path, query and the canonical body (JSON with sorted members,
//     normalised numbers and the Options.Noise fields removed; a multipart body's parts, not its
//     boundary; raw bytes for other content; a gzip body (Content-Encoding) by what it decodes to). A
//     JSON body naming a member twice in one object is refused with 400 ([ErrDuplicateMember]).
//     The body is read up to Options.MaxBodyBytes and handed to the handler intact;
//  4. runs the handler inside guard.Do, which claims (scope, key) once. The handler's context
//     carries the claim's fence (idemkit.FenceFromContext).
//
// # Streaming, not buffering
//
// The handler's response streams to the client as it is written (http.Flusher, http.Hijacker and
// http.ResponseController keep working); a copy of the status, the allow-listed headers
// (Options.ReplayHeaders) and the body up to Options.MaxResponseBytes is kept and becomes the stored
// result. So the first client always gets exactly what the handler wrote, with no added latency or
// memory for large responses, and duplicates get exactly what was stored. Streaming means the
// response is on its way before the outcome is recorded; if recording then fails (the store is
// down, or the claim's lease ran out and a newer attempt took it over: idemkit.ErrFenced), the
// client keeps the handler's response, the failure is logged, and a later retry may run the
// handler again. Buffering would not help there: the side effects already happened, and answering
// 5xx instead would only invite that retry sooner. The copy is what the handler wrote, not what
// reached the client: a client that goes away mid-response (or an http.TimeoutHandler outside that
// answered first) does not cut it short — the handler's writes keep succeeding while the response is
// recorded, and the retry gets all of it.
//
// # Storage policy
//
// By default 2xx, 3xx and 4xx responses except 401, 408, 425, 429 and 499 are stored (the record
// finishes SUCCEEDED, whatever the status) and replayed with Idempotent-Replayed: true. Other
// statuses (5xx) reach the client but finish the claim as a retryable failure, so the next retry
// runs the handler again; so does a hijacked connection, a body shorter than the Content-Length the
// handler set (net/http closes the connection mid-response), and a handler that returned without
// answering once its context had ended (its client went away). A panicking handler releases the
// claim the same way and the panic continues to the outer recoverer. Set-Cookie, Authorization,
// hop-by-hop, framing and encoding headers (Content-Length, Content-Encoding) are never replayed
// (a guarded HEAD's Content-Length, the size of the GET's body, is replayed to HEADs),
// and of the allow-listed headers only what the handler set is stored: middleware wrapped outside
// this one sets its own headers (and encodes the body) again on every replay. A response body
// larger than Options.MaxResponseBytes, one the handler encoded itself, or one whose header fields a
// replay cannot send as they went out (more than 256, or a value with a control character), is not
// stored: the record is SUCCEEDED with a marker and duplicates get 409 "response-not-stored" rather
// than a truncated, undecodable or altered response.
//
// # Status codes
//
// Errors are RFC 9457 application/problem+json bodies whose "type" is Options.ProblemBase followed
// by a Problem... name.
//
//	key required but missing                 400 missing-key
//	key malformed, too long, or a list       400 invalid-key
//	body unreadable                          400 bad-body
//	JSON body repeats a member name          400 duplicate-member
//	Options.Principal refused the caller     403 principal
//	same key in flight                       409 in-flight + Retry-After (425 with Options.DTM);
//	                                             Retry-After is at most Options.InFlightRetryAfter (1 s)
//	finished duplicate, Reject policy        409 duplicate
//	one-time token unknown, expired, used    409 token-invalid
//	finished, response not storable          409 response-not-stored
//	  (too large, encoded, or header fields
//	  a replay cannot send)
//	finished with a permanent error and no   409 rejected
//	  stored response, or with a response
//	  the record store could not hold
//	HEAD on a route whose GET is guarded     405 head-not-guarded (Allow: GET), the handler not
//	  and whose HEAD is not in Methods           run; with Optional and no key it passes (so does
//	                                             one chi routes to a HEAD endpoint of its own,
//	                                             r.Head with another handler than the GET's)
//	body over Options.MaxBodyBytes           413 body-too-large (with Options.DTM, by the branch's
//	                                             op: an action or try 409, a compensate, cancel or
//	                                             rollback 200 SUCCESS; see Options.DTM)
//	same key, different payload              422 payload-mismatch
//	unexpected error, handler did not run    500 internal
//	record store or lock unavailable         503 unavailable (or the handler runs unguarded with
//	                                             Options.RunUnguardedOnOutage: duplicates may then run twice)
//	the Guard's watchdog ended the handler's 503 unavailable, not stored: a retry runs again
//	  context and it answered nothing
//	same key finished                        the stored status, headers and body,
//	                                             plus Idempotent-Replayed: true
//
// # Key sources
//
// [Header], [Query], [URLParam] (chi or http.ServeMux), [JSONFields] (dotted paths into the JSON
// body), one-time tokens ([Tokens.Key], issued by [Tokens.Handler]), and any
// func(*http.Request) (string, error), composed with [FirstOf] and [All].
package httpx
