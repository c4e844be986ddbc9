package httpx

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	// ErrDuplicateMember: the JSON request body names a member twice in one object, at any depth
	// (names compared after unescaping: "a" and "\u0061" are one name). Parsers disagree on
	// which value counts (encoding/json keeps the last), so such a body is ambiguous: it is
	// refused (HTTP 400) rather than given the fingerprint or derived key of another body.
	ErrDuplicateMember = errors.New("httpx: JSON body repeats a member name")
)

// duplicateMemberError is ErrDuplicateMember with the name and where its repeat starts.
type duplicateMemberError struct {
	name   string
	offset int // byte offset of the repeated name in the body
}

func (e *duplicateMemberError) Error() string {
	return fmt.Sprintf("%s: %s at byte %d", ErrDuplicateMember.Error(), e.quoted(), e.offset)
}

func (e *duplicateMemberError) Is(target error) bool { return target == ErrDuplicateMember }

// quoted is the name as JSON, shortened to a readable length.
func (e *duplicateMemberError) quoted() string {
	name := e.name
	if len(name) > 64 {
		name = strings.ToValidUTF8(name[:64], "") + "…"
	}
	return strconv.Quote(name)
}

// errNotStored is returned from the guarded function for a response the storage policy does not
// keep: the claim finishes FAILED so a retry runs again.
type errNotStored struct{ status int }

func (e *errNotStored) Error() string {
	return "httpx: response status " + strconv.Itoa(e.status) + " not stored; retry allowed"
}

var errHijacked = errors.New("httpx: connection hijacked; response not stored")

// errBodyCut: the handler met an error reading the request body (the client went away mid-body), so
// its response answers a request cut short, not the one a retry sends; it is not stored.
var errBodyCut = errors.New("httpx: request body cut short; response not stored")

// errResponseCut: the handler wrote less body than the Content-Length it declared, so net/http
// closed the connection mid-response; what it wrote is not stored.
var errResponseCut = errors.New("httpx: handler wrote less than its Content-Length; response not stored")

// errTokenIssued: Tokens.Handler answered the request with a one-time token, which is stored nowhere
// in plain text (the token store keeps its hash): the response is not recorded, and a retry with the
// key is issued a new token.
var errTokenIssued = errors.New("httpx: the response issues a one-time token; not stored")

// errNoResponse: the handler returned without a response once its context had ended (its client
// went away); the empty 200 net/http would make of that is not stored.
var errNoResponse = errors.New("httpx: handler answered nothing after its context ended; response not stored")
