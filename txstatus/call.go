package txstatus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
)

// ErrRefused matches a [*RefusedError]: the DTM server itself answered that it refused the call, or
// idemkit refused it before sending anything (RefusedError.Local); either way it took no effect.
var ErrRefused = errors.New("txstatus: refused by the DTM server")

// ErrNoAnswer matches the errors of calls whose outcome is unknown: a timeout, a dropped or reset
// connection, a 5xx from DTM or from a proxy or gateway in front of it, or an answer that is not DTM's.
// The call may or may not have taken effect; ask the query API (or fence the gid) to know.
var ErrNoAnswer = errors.New("txstatus: no definite answer from the DTM server")

// ErrNotSent matches the errors of calls that were never sent because no connection to the server
// could be opened: the connection refused, no route to it, its name not resolved, the dial timed out
// or was given up (the HTTP client's timeout, or the call's context, ended first).
// The call certainly took no effect, as with [ErrRefused]; but this is an outage, not the server's
// answer: the same call can succeed once the server is back. It matches neither ErrRefused nor
// ErrNoAnswer.
var ErrNotSent = errors.New("txstatus: not sent: the DTM server could not be reached")

// RefusedError is a call that certainly took no effect: the DTM server's refusal — HTTP 409 with its
// {"dtm_result":"FAILURE","message":...} body (or that body with HTTP 200, as servers before v1.10
// answered) — or a request that could not be built at all (no server configured, a body that cannot be
// encoded). A request that was built but could not reach the server is no refusal: it matches
// [ErrNotSent]. DTM refuses, for example, to submit or prepare a gid it already holds in another state, or
// to abort a transaction that is no longer prepared. It matches [ErrRefused].
type RefusedError struct {
	// Op is the call refused: "submit", "prepare", "abort"...
	Op string
	// GID is the transaction's gid, when known.
	GID string
	// Message is DTM's message, or idemkit's when Local.
	Message string
	// Local: idemkit refused the call before sending anything (no server configured, a request that
	// cannot be built, a saga without steps); the DTM server never saw it.
	Local bool
}

func (e *RefusedError) Error() string {
	by := "DTM"
	if e.Local {
		by = "idemkit"
	}
	return fmt.Sprintf("txstatus: %s refused %s of %s: %s", by, e.Op, e.GID, e.Message)
}

// Is reports whether target is ErrRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// noAnswerError is a call whose outcome is unknown; it matches ErrNoAnswer and wraps the cause.
type noAnswerError struct {
	op, gid string
	err     error
}

func (e *noAnswerError) Error() string {
	return fmt.Sprintf("txstatus: %s of %s: outcome unknown: %v", e.op, e.gid, e.err)
}
func (e *noAnswerError) Unwrap() []error { return []error{ErrNoAnswer, e.err} }

// notSentError is a call that was never sent; it matches ErrNotSent and wraps the cause.
type notSentError struct {
	op, gid string
	err     error
}

func (e *notSentError) Error() string {
	return fmt.Sprintf("txstatus: %s of %s: not sent: %v", e.op, e.gid, e.err)
}
func (e *notSentError) Unwrap() []error { return []error{ErrNotSent, e.err} }

// connTrace records whether a transport that reports its connections (net/http's does, through
// httptrace) asked for one, and got one. One that asked and never got one wrote nothing; one that
// never asked reports nothing, and only its error can tell.
type connTrace struct{ asked, got atomic.Bool }

// trace returns ctx with t recording the connections of the requests made with it.
func (t *connTrace) trace(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn: func(string) { t.asked.Store(true) },
		GotConn: func(httptrace.GotConnInfo) { t.got.Store(true) },
	})
}

// never reports whether err, the error of an HTTP client's Do of a request traced by t, was met
// before any of it was written: no connection could be opened (see neverSent).
func (t *connTrace) never(err error) bool {
	return neverSent(err) || t.asked.Load() && !t.got.Load()
}

// neverSent reports whether err, an error of an HTTP client's Do, is a failure to open a connection
// (a *net.OpError with Op "dial", maybe behind a proxy's "proxyconnect" one): the request was never
// written. That holds of net/http's Transport, which writes a request only on a connection it holds
// and, once it wrote some of it, retries only a replayable one (GET, HEAD, OPTIONS, TRACE, or one
// carrying an Idempotency-Key header; never Call's POST): a dial error on a retry follows a first
// attempt that wrote nothing either. A custom RoundTripper that retries a request after writing it
// must not return a dial error for such a request.
func neverSent(err error) bool {
	var op *net.OpError
	for errors.As(err, &op) {
		if op.Op == "dial" {
			return true
		}
		err = op.Err
	}
	return false
}

// dtmAnswer is the body DTM answers its transaction calls with.
type dtmAnswer struct {
	Result  string `json:"dtm_result"`
	Message string `json:"message"`
}

// Call posts body as JSON to the server's op endpoint ("submit", "prepare", "abort", or another of
// DTM's global-transaction calls), bounded by ctx and the Client's HTTP timeout. gid only names the
// transaction in errors.
//
// It returns nil when DTM answered success (HTTP 200 without a FAILURE result); a [*RefusedError]
// when DTM itself refused; and otherwise an error matching [ErrNoAnswer] — the call may have taken
// effect or not — except a call that could not even connect to the server (connection refused, no
// route, a name not resolved, a dial timeout, the client's timeout or ctx ending while the transport
// was still waiting for a connection, ctx already ended), which was never sent and returns an error
// matching [ErrNotSent]: it took no effect, but the server did not refuse it (an outage, not an
// answer). Through a transport that reports no connections to net/http/httptrace, only a dial error
// says a call was not sent. A call that could not even be encoded or built returns an error matching
// ErrRefused too (nothing was sent). Call is safe for concurrent use.
func (c *Client) Call(ctx context.Context, op, gid string, body any) error {
	if c.Server == "" {
		return &RefusedError{Op: op, GID: gid, Message: "no DTM server configured", Local: true}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return &RefusedError{Op: op, GID: gid, Message: "encoding the request: " + err.Error(), Local: true}
	}
	if ctx.Err() != nil {
		return &notSentError{op, gid, context.Cause(ctx)}
	}
	// Whether the transport got a connection: net/http writes a request only on one it got, and
	// returns the timeout or the cancellation, not the dial error, when the client's timeout or ctx
	// ends a dial that hangs (a host that drops the packets).
	var conn connTrace
	req, err := http.NewRequestWithContext(conn.trace(ctx), http.MethodPost, c.base()+"/"+op, bytes.NewReader(b))
	if err != nil {
		return &RefusedError{Op: op, GID: gid, Message: "building the request: " + err.Error(), Local: true}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http().Do(req)
	if err != nil {
		if conn.never(err) {
			return &notSentError{op, gid, err}
		}
		return &noAnswerError{op, gid, err}
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &noAnswerError{op, gid, fmt.Errorf("reading the answer (HTTP %d): %w", resp.StatusCode, err)}
	}
	return classify(op, gid, resp.StatusCode, ans)
}

// classify turns DTM's answer to a call into nil, a *RefusedError or a no-answer error.
func classify(op, gid string, status int, body []byte) error {
	var a dtmAnswer
	isDTM := json.Unmarshal(body, &a) == nil
	switch {
	case isDTM && a.Result == "FAILURE" && (status == http.StatusConflict || status == http.StatusOK):
		return &RefusedError{Op: op, GID: gid, Message: a.Message}
	case status == http.StatusOK && !bytes.Contains(body, []byte("FAILURE")):
		return nil
	}
	text := strings.TrimSpace(string(body))
	if len(text) > 200 {
		text = text[:200] + "..."
	}
	return &noAnswerError{op, gid, fmt.Errorf("HTTP %d: %q", status, text)}
}
