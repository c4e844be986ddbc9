package txstatus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// ErrRefused matches a [*RefusedError]: the DTM server itself answered that it refused the call, which
// therefore took no effect.
var ErrRefused = errors.New("txstatus: refused by the DTM server")

// ErrNoAnswer matches the errors of calls whose outcome is unknown: a timeout, a dropped or reset
// connection, a 5xx from DTM or from a proxy or gateway in front of it, or an answer that is not DTM's.
// The call may or may not have taken effect; ask the query API (or fence the gid) to know.
var ErrNoAnswer = errors.New("txstatus: no definite answer from the DTM server")

// RefusedError is a call that certainly took no effect: the DTM server's refusal — HTTP 409 with its
// {"dtm_result":"FAILURE","message":...} body (or that body with HTTP 200, as servers before v1.10
// answered) — or a request that could not be sent at all (no server configured, a body that cannot be
// encoded). DTM refuses, for example, to submit or prepare a gid it already holds in another state, or
// to abort a transaction that is no longer prepared. It matches [ErrRefused].
type RefusedError struct {
	// Op is the call refused: "submit", "prepare", "abort"...
	Op string
	// GID is the transaction's gid, when known.
	GID string
	// Message is DTM's message.
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("txstatus: DTM refused %s of %s: %s", e.Op, e.GID, e.Message)
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
// effect or not. A call that could not even be encoded or built returns an error matching ErrRefused
// too (nothing was sent). Call is safe for concurrent use.
func (c *Client) Call(ctx context.Context, op, gid string, body any) error {
	if c.Server == "" {
		return &RefusedError{Op: op, GID: gid, Message: "no DTM server configured"}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return &RefusedError{Op: op, GID: gid, Message: "encoding the request: " + err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base()+"/"+op, bytes.NewReader(b))
	if err != nil {
		return &RefusedError{Op: op, GID: gid, Message: "building the request: " + err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http().Do(req)
	if err != nil {
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
