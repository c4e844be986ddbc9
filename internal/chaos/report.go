//go:build unix

package chaos

import (
	"cmp"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Report is what a run did and what the checker found.
type Report struct {
	Database      string        `json:"database"` // MariaDB or Postgres
	Seed          int64         `json:"seed"`
	Duration      time.Duration `json:"duration"` // the load phase, as configured
	Elapsed       time.Duration `json:"elapsed"`  // the whole run, setup to check
	Workers       int           `json:"workers"`
	Clients       int           `json:"clients"`
	Lease         time.Duration `json:"lease"`
	LockTTL       time.Duration `json:"lock_ttl"`
	SweepInterval time.Duration `json:"sweep_interval"`
	Sabotage      Sabotage      `json:"sabotage,omitempty"`

	Requests   int            `json:"requests"`   // every request sent, all phases
	Keys       int            `json:"keys"`       // distinct keys
	Duplicates int            `json:"duplicates"` // requests beyond the first per key
	ByPath     map[string]int `json:"by_path"`    // requests per path
	ByPhase    map[string]int `json:"by_phase"`   // requests per phase
	Answers    map[string]int `json:"answers"`    // answers per class

	Faults       []FaultRecord     `json:"faults"`
	FaultsByKind map[FaultKind]int `json:"faults_by_kind"` // injected faults per kind
	// WorkersStarted counts worker processes, replacements of killed ones included.
	WorkersStarted int         `json:"workers_started"`
	WorkerTotals   WorkerStats `json:"worker_totals"` // the workers' counters (a killed worker's last report)
	// SweptIn is how long after the load the sweeper took to leave no record PROCESSING.
	SweptIn time.Duration `json:"swept_in"`
	// MaxOverdue is the longest a PROCESSING record was seen past its lease during the load (sampled
	// every 250ms): how long a lapsed claim waited for a sweeper or a takeover.
	MaxOverdue time.Duration `json:"max_overdue"`
	Unsettled  int           `json:"unsettled"` // keys still without a terminal answer after settling

	Check *CheckResult `json:"check"`
	// HarnessErrors are failures of the harness itself (a worker that crashed, a fault that could not
	// be undone); they count as violations.
	HarnessErrors []string `json:"harness_errors,omitempty"`
}

// Violations returns every violation found: the checker's, then the harness errors.
func (r *Report) Violations() []Violation {
	var v []Violation
	if r.Check != nil {
		v = append(v, r.Check.Violations...)
	}
	for _, e := range r.HarnessErrors {
		v = append(v, Violation{Kind: ViolationHarness, Detail: e})
	}
	return v
}

// Summary renders the report for people: the figures, the faults, the violations counted by kind,
// and the violations themselves, at most perKind of each kind (0: all of them).
func (r *Report) Summary(perKind int) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("idemchaos on %s: %d workers, %d clients, load %s (run %s), lease %s, lock TTL %s, sweep every %s, seed %d",
		cmp.Or(r.Database, MariaDB), r.Workers, r.Clients, r.Duration, r.Elapsed.Round(time.Second), r.Lease, r.LockTTL, r.SweepInterval, r.Seed)
	if r.Sabotage != SabotageNone {
		p("SABOTAGE: %s (violations are expected)", r.Sabotage)
	}
	p("requests:    %d (%s; phases %s)", r.Requests, counts(r.ByPath), counts(r.ByPhase))
	p("keys:        %d, duplicates %d", r.Keys, r.Duplicates)
	p("answers:     %s", counts(r.Answers))
	total := 0
	for _, n := range r.FaultsByKind {
		total += n
	}
	p("faults:      %d injected (%s)", total, counts(r.FaultsByKind))
	for _, f := range r.Faults {
		mark := "+"
		if !f.Injected {
			mark = "-"
		}
		p("  %s %6.1fs %-16s %s", mark, f.At.Seconds(), f.Kind, f.Detail)
	}
	t := r.WorkerTotals
	p("workers:     %d processes; calls %d, executed %d, replayed %d (cached %d), in flight %d, unavailable %d, takeovers %d, fenced finishes %d, fail-open %d",
		r.WorkersStarted, t.Calls, t.Executed, t.Replayed, t.Cached, t.InFlight, t.Unavailable, t.Takeovers, t.Fenced, t.FailOpen)
	p("business:    applied %d, adopted after a lost finish %d, refused by the fence %d", t.Applied, t.Adopted, t.Stale)
	if r.Database == MariaDB {
		p("multi-stmt:  %d Guard-owned Tx-mode calls on multi-statement packets (every other worker process)", t.MultiTx)
	}
	p("sweeper:     %d stale claims recovered; a lapsed claim stayed PROCESSING at most %s past its lease; none PROCESSING %s after the load",
		t.Recovered, r.MaxOverdue.Round(10*time.Millisecond), r.SweptIn.Round(10*time.Millisecond))
	if c := r.Check; c != nil {
		p("checked:     %d effects, %d keys (%d succeeded, %d rejected, %d re-executed), %d answers, %d records, %d fenced finishes, %d stale writes, %d stalls; ledger total %d",
			c.Effects, c.Keys, c.SucceededKeys, c.RejectedKeys, c.ReExecutedKeys, c.Answers, c.Records, c.FencedChecked, c.StaleChecked, c.StallsChecked, c.LedgerTotal)
		p("mark mode:   %d keys hit by a kill inside the function, %d marked without their transfer (at most once: a kill or a lost reply)", c.MarkKilled, c.MarkLost)
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
	for kind, n := range byKind {
		if perKind > 0 && n > perKind {
			p("  ... and %d more %s", n-perKind, kind)
		}
	}
	return b.String()
}

func counts[K ~string](m map[K]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[K(k)]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
