//go:build unix

package msgchaos

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Report is what a run did and what the checker found.
type Report struct {
	Broker string `json:"broker"`
	Seed   int64  `json:"seed"`
	// Messages is the number of distinct messages (including Poison ones without an id); Published
	// the copies sent, DuplicateCopies those beyond each message's first, DedupedByBroker the copies
	// the broker itself dropped (JetStream's duplicate window).
	Messages        int `json:"messages"`
	Published       int `json:"published"`
	DuplicateCopies int `json:"duplicate_copies"`
	DedupedByBroker int `json:"deduped_by_broker"`
	Poison          int `json:"poison"`
	Rejects         int `json:"rejects"`
	Flaky           int `json:"flaky"`
	Consumers       int `json:"consumers"`
	// NoLocker counts the consumer processes (replacements included) that ran without the Locker.
	NoLocker int `json:"no_locker"`
	Workers  int `json:"workers"`
	// MaxDeliver is the JetStream consumer's MaxDeliver (Config.NATSMaxDeliver); 0 unlimited.
	MaxDeliver int `json:"max_deliver,omitempty"`
	// Kills counts consumer processes SIGKILLed, by where they were.
	Kills map[KillMode]int `json:"kills"`
	// Outcomes counts the consumers' decisions by outcome (a killed consumer's last one may be
	// missing).
	Outcomes map[string]int `json:"outcomes"`
	// Effects is the number of effect rows, EffectsSum their amounts, WantSum what they should sum to.
	Effects     int   `json:"effects"`
	EffectsSum  int64 `json:"effects_sum"`
	WantSum     int64 `json:"want_sum"`
	DeadLetters int   `json:"dead_letters"`
	// AdvisorySettled is the number of messages (stream sequences) the consumers settled from the
	// server's MAX_DELIVERIES advisory (natsjs: the consumer process of their last delivery was
	// killed), Advisory those by the outcomes they were settled with (a message every running consumer
	// settles counts once per outcome). GaveUp is the number of messages that ended with no effect
	// and a GaveUp dead letter (MaxDeliver). GaveUpRaced lists the messages with one effect and a
	// GaveUp dead letter from a delivery that raced the effect's (see judge), with how it gave up.
	AdvisorySettled int            `json:"advisory_settled,omitempty"`
	Advisory        map[string]int `json:"advisory,omitempty"`
	GaveUp          int            `json:"gave_up,omitempty"`
	GaveUpRaced     []string       `json:"gave_up_raced,omitempty"`
	// Violations lists everything the checker found wrong; empty when the run passed.
	Violations []string      `json:"violations"`
	Duration   time.Duration `json:"duration_ns"`
	// LogDir holds the consumers' logs when there were violations.
	LogDir string `json:"log_dir,omitempty"`
}

// TotalKills is the number of consumer processes killed.
func (r *Report) TotalKills() int {
	n := 0
	for _, k := range r.Kills {
		n += k
	}
	return n
}

// Summary renders the report as text.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "msg chaos on %s (seed %d, %s)\n", r.Broker, r.Seed, r.Duration)
	fmt.Fprintf(&b, "  messages   %d distinct (%d rejected by the business, %d flaky, %d poison without an id)\n", r.Messages, r.Rejects, r.Flaky, r.Poison)
	fmt.Fprintf(&b, "  published  %d copies: %d duplicates (%d dropped by the broker's own dedupe)\n", r.Published, r.DuplicateCopies, r.DedupedByBroker)
	fmt.Fprintf(&b, "  consumers  %d processes × %d workers (%d processes without the Locker); kill -9 ×%d (%s)\n", r.Consumers, r.Workers, r.NoLocker, r.TotalKills(), kv(r.Kills))
	fmt.Fprintf(&b, "  decisions  %s\n", kv(r.Outcomes))
	fmt.Fprintf(&b, "  effects    %d rows summing to %d (want %d); %d dead letters\n", r.Effects, r.EffectsSum, r.WantSum, r.DeadLetters)
	if r.MaxDeliver > 0 {
		fmt.Fprintf(&b, "  maxdeliver %d: %d messages settled from MAX_DELIVERIES advisories (%s); %d gave up without effect (dead-lettered GaveUp)\n",
			r.MaxDeliver, r.AdvisorySettled, kv(r.Advisory), r.GaveUp)
		fmt.Fprintf(&b, "             %d took effect beside a GaveUp dead letter of a delivery that raced it%s\n", len(r.GaveUpRaced), listed(r.GaveUpRaced))
	}
	fmt.Fprintf(&b, "  violations %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "    - %s\n", v)
	}
	if r.LogDir != "" {
		fmt.Fprintf(&b, "  consumer logs in %s\n", r.LogDir)
	}
	return b.String()
}

func listed(items []string) string {
	if len(items) == 0 {
		return ""
	}
	if len(items) > maxListed {
		return fmt.Sprintf(": %v and %d more", items[:maxListed], len(items)-maxListed)
	}
	return fmt.Sprintf(": %v", items)
}

func kv[K ~string](m map[K]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[K(k)]))
	}
	return strings.Join(parts, ", ")
}
