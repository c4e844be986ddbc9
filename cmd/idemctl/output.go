package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
)

// writeJSON prints v as indented JSON on stdout.
func (c *cli) writeJSON(v any) {
	c.printed = true
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// table writes aligned columns.
type table struct{ w *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{w: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cols ...string) {
	for i, c := range cols {
		cols[i] = cell(c)
	}
	fmt.Fprintln(t.w, strings.Join(cols, "\t"))
}

func (t *table) flush() { _ = t.w.Flush() }

// cell is s as a table cell shows it: "-" for empty, s itself when it reads back as itself, else s
// quoted as Go quotes it (as the messages' %q do). Scopes, keys and gids come from clients, and the
// Guard accepts any printable UTF-8: a terminal would show a trailing space, a no-break or zero-width
// space like nothing or another key, and a bidirectional override would reorder the rest of the row.
func cell(s string) string {
	switch {
	case s == "":
		return "-"
	case plain(s):
		return s
	}
	return strconv.Quote(s)
}

// plain reports whether s shows as itself in a cell: printable (strconv.IsPrint: no control, format
// or non-ASCII space characters), valid UTF-8 without U+FFFD, no space at either end, not starting
// with a double quote (a quoted cell does).
func plain(s string) bool {
	if strings.HasPrefix(s, `"`) || strings.HasPrefix(s, " ") || strings.HasSuffix(s, " ") {
		return false
	}
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// clip shortens s to n runes, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// ago says how long before now t was ("3m12s ago"), or "-" for the zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + roundDur(-d)
	}
	return roundDur(d) + " ago"
}

// until says how long after now t is ("in 25s" or "12s ago").
func until(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if t.After(now) {
		return "in " + roundDur(t.Sub(now))
	}
	return roundDur(now.Sub(t)) + " ago"
}

func roundDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

// stamp formats t in UTC, "-" for the zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// preview shows the first n bytes of b: as text when it is printable UTF-8, else in hex.
func preview(b []byte, n int) string {
	if len(b) == 0 {
		return "(empty)"
	}
	cut := b
	more := ""
	if len(cut) > n {
		cut, more = cut[:n], fmt.Sprintf("… (%d more bytes)", len(b)-n)
	}
	// A cut may split the last character: drop its bytes before judging the text.
	txt := cut
	for len(cut) < len(b) && len(txt) > 0 && len(cut)-len(txt) < utf8.UTFMax && !utf8.Valid(txt) {
		txt = txt[:len(txt)-1]
	}
	if len(txt) > 0 && utf8.Valid(txt) && printable(string(txt)) {
		if !plain(string(txt)) {
			return strconv.Quote(string(txt)) + more // line breaks, format characters: see cell
		}
		return string(txt) + more
	}
	return fmt.Sprintf("hex %x%s", cut, more)
}

func printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || (unicode.IsControl(r) && r != '\n' && r != '\t') {
			return false
		}
	}
	return true
}

// recordJSON is a record as --json prints it.
type recordJSON struct {
	Scope        string    `json:"scope"`
	Key          string    `json:"key"`
	Status       string    `json:"status"`
	Fence        int64     `json:"fence"`
	Owner        string    `json:"owner"`
	Fingerprint  string    `json:"fingerprint,omitempty"`
	GID          string    `json:"gid,omitempty"`
	BranchID     string    `json:"branch_id,omitempty"`
	ResponseSize int64     `json:"response_size"`
	Response     []byte    `json:"response,omitempty"` // base64, inspect only
	Error        string    `json:"error,omitempty"`
	LeaseUntil   time.Time `json:"lease_until,omitzero"`
	ExpiresAt    time.Time `json:"expires_at,omitzero"`
	CreatedAt    time.Time `json:"created_at,omitzero"`
	UpdatedAt    time.Time `json:"updated_at,omitzero"`
	Stuck        bool      `json:"stuck"`
	Expired      bool      `json:"expired"`
}

func (c *cli) recordJSON(r *idemkit.Record, size int64, now time.Time) recordJSON {
	utc := func(t time.Time) time.Time {
		if t.IsZero() {
			return t
		}
		return t.UTC()
	}
	return recordJSON{
		Scope: c.adm.DisplayScope(r.Scope), Key: r.Key, Status: string(r.Status), Fence: r.Fence, Owner: r.Owner,
		Fingerprint: r.Fingerprint, GID: r.GID, BranchID: r.BranchID, ResponseSize: size, Response: r.Response,
		Error: r.Error, LeaseUntil: utc(r.LeaseUntil), ExpiresAt: utc(r.ExpiresAt), CreatedAt: utc(r.CreatedAt),
		UpdatedAt: utc(r.UpdatedAt),
		Stuck:     r.Status == idemkit.StatusProcessing && r.LeaseExpired(now),
		Expired:   countsAsAbsent(r, now),
	}
}

// entriesTable prints entries as a table.
func (c *cli) entriesTable(w io.Writer, entries []*admin.Entry, now time.Time) {
	t := newTable(w, "SCOPE", "KEY", "STATUS", "FENCE", "UPDATED", "LEASE", "EXPIRES", "GID", "RESULT", "ERROR")
	for _, e := range entries {
		lease := "-"
		if e.Status == idemkit.StatusProcessing {
			lease = until(now, e.LeaseUntil)
			if e.LeaseExpired(now) {
				lease = "ran out " + lease
			}
		}
		result := "-"
		if e.ResponseSize > 0 {
			result = fmt.Sprintf("%dB", e.ResponseSize)
		}
		t.row(c.adm.DisplayScope(e.Scope), e.Key, string(e.Status), fmt.Sprint(e.Fence), ago(now, e.UpdatedAt), lease,
			until(now, e.ExpiresAt), e.GID, result, clip(e.Error, 48))
	}
	t.flush()
}

// confirm asks question on stderr and reads the answer from stdin: "y" or "yes" confirms. The
// question does not count against --timeout: once confirmed, it returns a context with a fresh one
// for the writes that follow (the operator may take longer than the timeout to read a purge list). An
// interrupt (Ctrl-C) while it waits ends the command with nothing changed.
func (c *cli) confirm(question string) (context.Context, error) {
	if c.o.yes {
		return c.timed(), nil
	}
	c.timedCtx = nil // the question is not timed: a context that ran out while it waited is not used again
	fmt.Fprintf(c.stderr, "%s [y/N] ", question)
	answer := make(chan string, 1)
	go func() { // left blocked on stdin after an interrupt: the command ends right after
		line, _ := bufio.NewReader(c.stdin).ReadString('\n')
		answer <- line
	}()
	var line string
	select {
	case line = <-answer:
	case <-c.base.Done():
		fmt.Fprintln(c.stderr)
		return nil, fmt.Errorf("%w (%w)", errNotConfirmed, context.Cause(c.base))
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return c.timed(), nil
	}
	if line == "" {
		fmt.Fprintln(c.stderr)
	}
	return nil, errNotConfirmed
}

// timed returns a context bounded by --timeout from now, cancelled when the command ends. Its cause,
// once the bound passed, is a timeoutError, which fail adds to the error it reports.
func (c *cli) timed() context.Context {
	ctx, cancel := context.WithTimeoutCause(c.base, c.o.timeout, &timeoutError{c.o.timeout})
	c.cancels = append(c.cancels, cancel)
	c.timedCtx = ctx
	return ctx
}

// timeoutError says that --timeout ended the command: the statement or command it cut short reports
// only its context's deadline.
type timeoutError struct{ d time.Duration }

func (e *timeoutError) Error() string {
	return fmt.Sprintf("--timeout %s ran out: raise --timeout or IDEMCTL_TIMEOUT", e.d)
}

// timedOut returns the timeoutError of the context the command last worked on, when --timeout ended
// it, or nil.
func (c *cli) timedOut() error {
	if c.timedCtx == nil {
		return nil
	}
	var te *timeoutError
	if cause := context.Cause(c.timedCtx); errors.As(cause, &te) {
		return te
	}
	return nil
}

// countsAsAbsent reports whether r's expiry makes it count as absent, as the Guard judges it: not a
// claim tied to a global transaction, nor one whose lease is still live (renewed past its expiry).
func countsAsAbsent(r *idemkit.Record, now time.Time) bool {
	return r.Expired(now) && (r.Status != idemkit.StatusProcessing || r.GID == "" && r.LeaseExpired(now))
}
