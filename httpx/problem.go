package httpx

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Problem type names. The "type" member of a problem+json body is Options.ProblemBase followed by
// one of these; the README documents each under an anchor of the same name.
const (
	ProblemMissingKey        = "missing-key"         // 400: no key where one is required
	ProblemInvalidKey        = "invalid-key"         // 400: key malformed, too long, or a list
	ProblemBadBody           = "bad-body"            // 400: the body could not be read
	ProblemDuplicateMember   = "duplicate-member"    // 400: the JSON body repeats a member name
	ProblemPrincipal         = "principal"           // 403: Options.Principal refused the caller
	ProblemInFlight          = "in-flight"           // 409 (425 with Options.DTM): the key is being processed
	ProblemDuplicate         = "duplicate"           // 409: finished duplicate under the Reject policy
	ProblemTokenInvalid      = "token-invalid"       // 409: one-time token unknown, expired or used
	ProblemResponseNotStored = "response-not-stored" // 409: finished, but the response could not be stored (too large, encoded, unreplayable header fields)
	ProblemRejected          = "rejected"            // 409: finished with a permanent error, or a response the store cannot hold, and no stored response
	ProblemHeadNotGuarded    = "head-not-guarded"    // 405: HEAD on a route whose GET is guarded and whose HEAD is not
	ProblemBodyTooLarge      = "body-too-large"      // 413: body over Options.MaxBodyBytes
	ProblemPayloadMismatch   = "payload-mismatch"    // 422: key reused with another payload
	ProblemInternal          = "internal"            // 500: unexpected error; the handler did not run
	ProblemUnavailable       = "unavailable"         // 503: record store or lock unavailable
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// RequestID is the request's X-Request-Id, when it had one.
	RequestID string `json:"requestId,omitempty"`
	// OriginalStatus is the status of the first response, for response-not-stored and duplicate.
	OriginalStatus int `json:"originalStatus,omitempty"`
	// RetryAfter repeats the Retry-After header, in seconds, for in-flight.
	RetryAfter int `json:"retryAfter,omitempty"`
}

var problemTitles = map[string]string{
	ProblemMissingKey:        "Idempotency key required",
	ProblemInvalidKey:        "Invalid idempotency key",
	ProblemBadBody:           "Request body unreadable",
	ProblemDuplicateMember:   "JSON body repeats a member name",
	ProblemPrincipal:         "Caller not identified",
	ProblemInFlight:          "Request with this idempotency key in progress",
	ProblemDuplicate:         "Duplicate request",
	ProblemTokenInvalid:      "Idempotency token unknown, expired or already used",
	ProblemResponseNotStored: "Request already processed; response not stored",
	ProblemRejected:          "Request already rejected",
	ProblemHeadNotGuarded:    "HEAD not guarded on this route",
	ProblemBodyTooLarge:      "Request body too large",
	ProblemPayloadMismatch:   "Idempotency key reused with a different payload",
	ProblemInternal:          "Internal error",
	ProblemUnavailable:       "Idempotency store unavailable",
}

// writeProblem answers with an application/problem+json body. Nothing of the handler's headers
// was written (the handler did not run), so the response carries only the problem.
func writeProblem(w http.ResponseWriter, cfg *config, p problem) {
	p.Title = problemTitles[p.Type]
	p.Type = cfg.ProblemBase + p.Type
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: strings and ints only
		body = []byte(`{"title":"Internal error","status":500}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
