// Package txstatus asks a DTM server how a global transaction stands, through its HTTP query API
// (GET <server>/query?gid=...). DTM has no completion callback, and a submit that waits for the result
// reports the same FAILURE for a saga that rolled back and for one still retrying; the query API is the
// authoritative answer. It is used by the saga and TCC initiators to wait for an outcome and by the
// reconciler to settle records whose initiator died.
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
	// HTTP is the client used. Defaults to one with a DefaultTimeout timeout.
	HTTP *http.Client
	// PollInterval is the pause between queries in Wait. Defaults to DefaultPollInterval.
	PollInterval time.Duration
}

var defaultHTTP = &http.Client{Timeout: DefaultTimeout}

// Status returns the global transaction's status, Unknown when the server has no transaction with gid,
// or an error when the server cannot be asked or answers something unexpected.
func (c *Client) Status(ctx context.Context, gid string) (Status, error) {
	if c.Server == "" {
		return Unknown, errors.New("txstatus: no DTM server configured")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.Server, "/")+"/query?gid="+url.QueryEscape(gid), nil)
	if err != nil {
		return Unknown, fmt.Errorf("txstatus: building query: %w", err)
	}
	resp, err := cmp.Or(c.HTTP, defaultHTTP).Do(req)
	if err != nil {
		return Unknown, fmt.Errorf("txstatus: querying %s: %w", gid, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return Unknown, fmt.Errorf("txstatus: reading query answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return Unknown, fmt.Errorf("txstatus: query %s: HTTP %d: %.200s", gid, resp.StatusCode, body)
	}
	return parse(body)
}

// parse reads the query API's answer: {"branches":[...],"transaction":{"status":"..."}} or a null
// transaction for an unknown gid.
func parse(body []byte) (Status, error) {
	var ans struct {
		Transaction *struct {
			Status string `json:"status"`
		} `json:"transaction"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return Unknown, fmt.Errorf("txstatus: malformed query answer: %w", err)
	}
	if ans.Transaction == nil {
		return Unknown, nil
	}
	switch st := Status(ans.Transaction.Status); st {
	case Prepared, Submitted, Aborting, Succeed, Failed:
		return st, nil
	default:
		return Unknown, fmt.Errorf("txstatus: unexpected transaction status %q", ans.Transaction.Status)
	}
}

// Wait polls until the transaction reaches an outcome (Succeed or Failed) or ctx is done. It returns
// the last status seen; when ctx ends first it returns that status (not final) and no error, so a caller
// can tell "still running" from "could not ask".
func (c *Client) Wait(ctx context.Context, gid string) (Status, error) {
	poll := cmp.Or(c.PollInterval, DefaultPollInterval)
	t := time.NewTimer(0)
	defer t.Stop()
	last := Unknown
	for {
		select {
		case <-ctx.Done():
			return last, nil
		case <-t.C:
		}
		st, err := c.Status(ctx, gid)
		if err != nil {
			if ctx.Err() != nil {
				return last, nil
			}
			return last, err
		}
		if st.Final() {
			return st, nil
		}
		last = st
		t.Reset(poll)
	}
}

// NewGID returns a random global transaction id (DTM accepts any unique string up to 128 bytes);
// generating it locally saves a round trip to the server.
func NewGID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "idk" + hex.EncodeToString(b[:])
}
