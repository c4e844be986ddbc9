// Package txstatus talks to a DTM server about global transactions: it asks how one stands, through
// the HTTP query API (GET <server>/query?gid=...), and makes the calls whose answer decides whether one
// started (submit, prepare, abort) with a context and an answer that tells a refusal from silence.
//
// DTM has no completion callback, and a submit that waits for the result reports the same FAILURE for
// a saga that rolled back and for one still retrying; the query API is the authoritative answer. The
// saga and TCC initiators use this package to start transactions and wait for their outcome, and the
// reconciler uses it to settle records whose initiator died — after [Client.Fence] made sure a
// transaction the server never heard of can no longer start.
//
// Only DTM's own refusal ([RefusedError]: HTTP 409 with DTM's {"dtm_result":"FAILURE"} body) and a call
// never sent (matching [ErrNotSent]: no connection to the server could be opened — refused, no route,
// a name not resolved, a dial timeout) say a call did not take effect; the first is the server's
// answer, the second an outage. Anything else that is not a success — a timeout, a reset connection, a
// 5xx from DTM or from a proxy or gateway in front of it, a body that is not DTM's — matches
// [ErrNoAnswer]: the call may or may not have taken effect, and only a later query (or a fence) can
// tell.
package txstatus

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Status is a global transaction's status as DTM reports it.
type Status string

// DTM's global transaction statuses, plus Unknown for a gid the server has no record of.
const (
	Prepared  Status = "prepared"
	Submitted Status = "submitted"
	Aborting  Status = "aborting"
	Succeed   Status = "succeed"
	Failed    Status = "failed"
	Unknown   Status = ""
)

// Final reports whether s is an outcome: Succeed or Failed.
func (s Status) Final() bool { return s == Succeed || s == Failed }

// Defaults of [Client].
const (
	DefaultPollInterval = 100 * time.Millisecond
	DefaultTimeout      = 5 * time.Second
)

// Client queries one DTM server. The zero value is not usable: set Server.
type Client struct {
	// Server is the DTM HTTP API base, e.g. "http://127.0.0.1:36789/api/dtmsvr".
	Server string
	// HTTP is the client used. Defaults to one with a DefaultTimeout timeout. Its transport must not
	// retry a POST it already wrote and then fail with a dial error, or before it got a connection:
	// Call takes such an error for a call never sent (see [ErrNotSent]). net/http's Transport never does.
	HTTP *http.Client
	// PollInterval is the pause between queries in Wait. Defaults to DefaultPollInterval. A negative
	// one is an error: Wait and WaitInfo return it without querying.
	PollInterval time.Duration
}

var defaultHTTP = &http.Client{Timeout: DefaultTimeout}

// Info is what the query API reports about a global transaction.
type Info struct {
	// Status is the transaction's status; Unknown when the server has no transaction with the gid.
	Status Status
	// RollbackReason is why the server rolled the transaction back, when it says: the message of the
	// branch that failed, a timeout, or the reason an initiator gave when it aborted. Empty otherwise.
	RollbackReason string
	// TransType is the type the server stores the transaction under ("saga", "tcc", "msg"...); "" when
	// the answer does not say (a server that is not DTM, a stub).
	TransType string
	// Branches is the number of branch operations the server holds for the transaction (two per saga
	// step: action and compensation; two per registered TCC branch: confirm and cancel). It is
	// meaningful only when TransType is set.
	Branches int
}

// RanNothingFor reports whether the transaction the server reports, which an initiator of transType
// ("saga" or "tcc"; "" when unknown) started, is not that initiator's transaction but one holding its
// gid, so nothing that initiator asked for ran on it. DTM v1.19 accepts a saga's submit for a gid it
// holds as a prepared transaction of any type — such as the empty TCC of a [Client.Fence] — flips that
// transaction to submitted and runs the branches already stored with it (the fence's: none), then
// reports the gid succeed: on a SQL store the stored transaction keeps the fence's type ("tcc"), on
// boltdb and Redis it takes the saga's type but keeps the fence's branches, none. So, when the answer
// names the stored type:
//   - a transaction stored under another type than transType is not the initiator's;
//   - a saga with no branch is not the initiator's (an initiator never submits a saga without steps);
//   - with transType unknown, a transaction with no branch ran nothing.
//
// A TCC that joins a gid held by a fence's prepared TCC is the initiator's own: its branches are
// registered on it, and the fence's abort cancels them or its submit confirms them.
func (i Info) RanNothingFor(transType string) bool {
	switch {
	case i.TransType == "" || i.Status == Unknown:
		return false
	case transType == "":
		return i.Branches == 0
	case i.TransType != transType:
		return true
	default:
		return transType == "saga" && i.Branches == 0
	}
}

// On returns the client an initiator of server talks to it with: c, or on server when c's own Server is
// empty (a copy: c is not changed), or a new Client on server when c is nil. An initiator's Status set
// only for its HTTP client or PollInterval thus talks to the initiator's Server.
func (c *Client) On(server string) *Client {
	if c == nil {
		return &Client{Server: server}
	}
	cc := *c
	cc.Server = cmp.Or(cc.Server, server)
	return &cc
}

// Status returns the global transaction's status, Unknown when the server has no transaction with gid,
// or an error when the server cannot be asked or answers something unexpected: one matching
// [ErrNotSent] when no connection to the server could be opened, as [Client.Call] tells it. An
// initiator asks it before it starts a gid chosen up front: a server it cannot even connect to is an
// outage, as for a start that could not be sent. ([Client.Query]'s errors never match ErrNotSent: a
// query made after a start says nothing of whether that start was sent.)
func (c *Client) Status(ctx context.Context, gid string) (Status, error) {
	info, err := c.query(ctx, gid, true)
	return info.Status, err
}

// Query returns what the server knows about the global transaction gid (a zero Info, Status Unknown,
// when it has none), or an error when the server cannot be asked or answers something unexpected.
func (c *Client) Query(ctx context.Context, gid string) (Info, error) {
	return c.query(ctx, gid, false)
}

// Branch is one branch operation the server holds for a global transaction.
type Branch struct {
	// BranchID and Op identify it ("01", "action"); URL is where the server calls it.
	BranchID, Op, URL string
	// Payload is the body the server sends it.
	Payload []byte
}

// QueryBranches is [Client.Query], with the branch operations the server holds for gid (none when it
// has no transaction with gid). They carry their payloads: the answer can be large.
func (c *Client) QueryBranches(ctx context.Context, gid string) (Info, []Branch, error) {
	body, err := c.fetch(ctx, gid, false)
	if err != nil {
		return Info{}, nil, err
	}
	info, err := parseInfo(body)
	if err != nil || info.Status == Unknown {
		return info, nil, err
	}
	var ans struct {
		Branches []struct {
			BranchID string `json:"branch_id"`
			Op       string `json:"op"`
			URL      string `json:"url"`
			BinData  []byte `json:"bin_data"`
		} `json:"branches"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return Info{}, nil, fmt.Errorf("txstatus: malformed query answer: %w", err)
	}
	branches := make([]Branch, len(ans.Branches))
	for i, b := range ans.Branches {
		branches[i] = Branch{BranchID: b.BranchID, Op: b.Op, URL: b.URL, Payload: b.BinData}
	}
	return info, branches, nil
}

// query is Query; with notSent, an error that opened no connection matches ErrNotSent (see Status).
func (c *Client) query(ctx context.Context, gid string, notSent bool) (Info, error) {
	body, err := c.fetch(ctx, gid, notSent)
	if err != nil {
		return Info{}, err
	}
	return parseInfo(body)
}

// fetch returns the query API's answer about gid; with notSent, an error that opened no connection
// matches ErrNotSent (see Status).
func (c *Client) fetch(ctx context.Context, gid string, notSent bool) ([]byte, error) {
	if c.Server == "" {
		return nil, errors.New("txstatus: no DTM server configured")
	}
	var conn connTrace
	if notSent {
		ctx = conn.trace(ctx)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base()+"/query?gid="+url.QueryEscape(gid), nil)
	if err != nil {
		return nil, fmt.Errorf("txstatus: building query: %w", err)
	}
	resp, err := c.http().Do(req)
	if err != nil {
		if notSent && conn.never(err) {
			return nil, &notSentError{"query", gid, err}
		}
		return nil, fmt.Errorf("txstatus: querying %s: %w", gid, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxQueryAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("txstatus: reading query answer: %w", err)
	}
	if len(body) > maxQueryAnswer {
		return nil, fmt.Errorf("txstatus: query %s: the answer is larger than %d bytes", gid, maxQueryAnswer)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("txstatus: query %s: HTTP %d: %.200s", gid, resp.StatusCode, body)
	}
	return body, nil
}

// maxQueryAnswer bounds the query API's answer, in bytes. The answer carries every branch operation
// with its payload (base64, twice per saga step: action and compensation), so a transaction within
// DTM's and the branches' limits can answer megabytes: a tighter bound would leave its outcome
// unreadable, for the initiator and the reconciler alike, for good.
const maxQueryAnswer = 256 << 20

func (c *Client) base() string       { return strings.TrimSuffix(c.Server, "/") }
func (c *Client) http() *http.Client { return cmp.Or(c.HTTP, defaultHTTP) }

// parse reads the status from the query API's answer.
func parse(body []byte) (Status, error) {
	info, err := parseInfo(body)
	return info.Status, err
}

// parseInfo reads the query API's answer: {"branches":[...],"transaction":{"status":"...",
// "trans_type":"...","rollback_reason":"..."}} or a null transaction for an unknown gid.
func parseInfo(body []byte) (Info, error) {
	var ans struct {
		Branches    []struct{} `json:"branches"` // counted, not kept
		Transaction *struct {
			Status         string `json:"status"`
			TransType      string `json:"trans_type"`
			RollbackReason string `json:"rollback_reason"`
		} `json:"transaction"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return Info{}, fmt.Errorf("txstatus: malformed query answer: %w", err)
	}
	if ans.Transaction == nil {
		return Info{}, nil
	}
	switch st := Status(ans.Transaction.Status); st {
	case Prepared, Submitted, Aborting, Succeed, Failed:
		return Info{Status: st, RollbackReason: ans.Transaction.RollbackReason, TransType: ans.Transaction.TransType,
			Branches: len(ans.Branches)}, nil
	default:
		return Info{}, fmt.Errorf("txstatus: unexpected transaction status %q", ans.Transaction.Status)
	}
}

// Wait polls until the transaction reaches an outcome (Succeed or Failed) or ctx is done. It returns
// the last status seen; when ctx ends first it returns that status (not final) and no error, so a caller
// can tell "still running" from "could not ask" — an error, when no query was answered at all. A query
// that fails is tried again at the next poll; when three fail in a row, Wait gives up with
// the last status seen and the latest query's error (see [Client.WaitInfo]).
func (c *Client) Wait(ctx context.Context, gid string) (Status, error) {
	info, err := c.WaitInfo(ctx, gid)
	return info.Status, err
}

// waitTolerance is how many queries in a row may fail before a wait gives up: one failed poll (a
// gateway's 502 in front of DTM, a reset connection) does not end it.
const waitTolerance = 3

// WaitInfo is [Client.Wait] returning the last [Info] seen rather than only its status. A query that
// fails is tried again at the next poll; the wait returns the error when waitTolerance queries in a
// row failed, or when ctx ends before any query was answered (it could not ask).
func (c *Client) WaitInfo(ctx context.Context, gid string) (Info, error) {
	if c.PollInterval < 0 {
		return Info{}, fmt.Errorf("txstatus: PollInterval must not be negative, got %s", c.PollInterval)
	}
	poll := cmp.Or(c.PollInterval, DefaultPollInterval)
	t := time.NewTimer(0)
	defer t.Stop()
	var last Info
	var lastErr error // of the latest query, while none was answered
	answered, failed := false, 0
	for {
		select {
		case <-ctx.Done():
			return last, unanswered(ctx, answered, lastErr)
		case <-t.C:
		}
		info, err := c.Query(ctx, gid)
		if err != nil {
			if ctx.Err() != nil {
				return last, unanswered(ctx, answered, cmp.Or(lastErr, err))
			}
			lastErr = err
			if failed++; failed >= waitTolerance {
				return last, err
			}
			t.Reset(poll)
			continue
		}
		answered, failed = true, 0
		if info.Status.Final() {
			return info, nil
		}
		last = info
		t.Reset(poll)
	}
}

// unanswered is a wait's error when ctx ended: none once a query was answered (the last status
// seen is the answer), else the latest query's error (or ctx's): the server could not be asked.
func unanswered(ctx context.Context, answered bool, lastErr error) error {
	if answered {
		return nil
	}
	return fmt.Errorf("txstatus: no answer before the wait ended: %w", cmp.Or(lastErr, ctx.Err()))
}

// NewGID returns a random global transaction id (DTM accepts any unique string up to 128 bytes);
// generating it locally saves a round trip to the server.
func NewGID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "idk" + hex.EncodeToString(b[:])
}
