//go:build unix

package chaos

import (
	"fmt"
	"strings"
	"time"
)

// DTMReport is what a DTM scenario run did and what its checker found.
type DTMReport struct {
	Mode      DTMMode       `json:"mode"`
	Seed      int64         `json:"seed"`
	Duration  time.Duration `json:"duration"` // the storm, as configured
	Elapsed   time.Duration `json:"elapsed"`  // the whole run, build to check
	Clients   int           `json:"clients"`
	Dup       int           `json:"dup"`
	KillEvery time.Duration `json:"kill_every"`

	Requests   int            `json:"requests"`   // answered or cut requests, storm and settle
	Keys       int            `json:"keys"`       // distinct keys
	Duplicates int            `json:"duplicates"` // requests beyond the first per key
	Answers    map[string]int `json:"answers"`    // answers per class
	// Kills counts SIGKILLs of the order service (with its DTM child process in the embedded mode);
	// Starts counts its starts; CutRequests counts requests that got no answer (killed or down).
	Kills int `json:"kills"`
	// KilledInFlight sums the orders PENDING (their global transaction in flight) a moment before
	// each kill.
	KilledInFlight int   `json:"killed_in_flight"`
	Starts         int   `json:"starts"`
	CutRequests    int64 `json:"cut_requests"`
	// Fenced counts the gids the reconcilers found unknown to DTM and fenced (from the service's
	// logs); Unreadable counts retries that could not find their order (answered 500).
	Fenced     int `json:"fenced"`
	Unreadable int `json:"unreadable"`
	Unsettled  int `json:"unsettled"` // keys still unanswered when the settle phase gave up

	Check *DTMCheck `json:"check"`
	// HarnessErrors are failures of the harness itself; they count as violations.
	HarnessErrors []string `json:"harness_errors,omitempty"`
}

// Violations returns every violation found: the checker's, then the harness errors.
func (r *DTMReport) Violations() []Violation {
	var v []Violation
	if r.Check != nil {
		v = append(v, r.Check.Violations...)
	}
	for _, e := range r.HarnessErrors {
		v = append(v, Violation{Kind: ViolationHarness, Detail: e})
	}
	return v
}

// Summary renders the report for people, with at most perKind violations of each kind (0: all).
func (r *DTMReport) Summary(perKind int) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("idemchaos dtm (%s): %d clients, %d identical requests per new key, storm %s (run %s), a SIGKILL every ~%s, seed %d",
		r.Mode, r.Clients, r.Dup, r.Duration, r.Elapsed.Round(time.Second), r.KillEvery, r.Seed)
	p("requests:    %d, keys %d, duplicates %d", r.Requests, r.Keys, r.Duplicates)
	p("answers:     %s", counts(r.Answers))
	p("faults:      %d SIGKILLs of the order service%s with %d orders in flight, %d starts, %d requests cut",
		r.Kills, map[bool]string{true: " (and its DTM child process)", false: ""}[r.Mode == DTMEmbedded], r.KilledInFlight, r.Starts, r.CutRequests)
	p("reconciler:  %d unknown gids fenced; %d retries could not find their order; %d keys unanswered", r.Fenced, r.Unreadable, r.Unsettled)
	if c := r.Check; c != nil {
		p("checked:     %d orders (%d PAID, %d FAILED; %d keys retried after a rollback), %d answers, %d accounts, %d SKUs, %d barrier rows",
			c.Orders, c.Paid, c.Failed, c.RetriedKeys, c.Answers, c.Accounts, c.SKUs, c.BarrierRows)
	}
	v := r.Violations()
	byKind := map[string]int{}
	for _, x := range v {
		byKind[x.Kind]++
	}
	p("violations:  %d (%s)", len(v), counts(byKind))
	shown := map[string]int{}
	for _, x := range v {
		if perKind > 0 && shown[x.Kind] == perKind {
			continue
		}
		shown[x.Kind]++
		p("  VIOLATION %s", x)
	}
	return b.String()
}
