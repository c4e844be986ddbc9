package httpx

import (
	"errors"
	"strconv"
)

// Errors returned by key sources and the token service, and mapped to responses by the middleware.
// Compare with errors.Is.
var (
	// ErrKeyMissing: the request carries no idempotency key. A KeySource may return it instead of
	// "": either gives HTTP 400, or passes the request through with Options.Optional.
	ErrKeyMissing = errors.New("httpx: idempotency key missing")
	// ErrBodyTooLarge: the request body exceeds Options.MaxBodyBytes (HTTP 413).
	ErrBodyTooLarge = errors.New("httpx: request body too large")
	// ErrBodyRead: the request body could not be read (HTTP 400).
	ErrBodyRead = errors.New("httpx: reading request body")
	// ErrTokenInvalid: a one-time token is unknown, expired, already used or issued to another
	// principal (HTTP 409).
	ErrTokenInvalid = errors.New("httpx: idempotency token unknown, expired or already used")
	// ErrPrincipal: Options.Principal could not identify the caller (HTTP 403). Principal
	// functions may wrap it; any other error they return is mapped the same way.
	ErrPrincipal = errors.New("httpx: principal unknown")
)

// errNotStored is returned from the guarded function for a response the storage policy does not
// keep: the claim finishes FAILED so a retry runs again.
type errNotStored struct{ status int }

func (e *errNotStored) Error() string {
	return "httpx: response status " + strconv.Itoa(e.status) + " not stored; retry allowed"
}

var errHijacked = errors.New("httpx: connection hijacked; response not stored")
