package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/idemkit/idemkit/admin"
)

// statsJSON is one scope of stats --json.
type statsJSON struct {
	admin.ScopeStats
	// Calls and DuplicateRate come from --metrics; the rate is null without it or without calls.
	Calls         *callCounts `json:"calls,omitempty"`
	DuplicateRate *float64    `json:"duplicate_rate"`
}

func (c *cli) stats(ctx context.Context, _ []string) error {
	p := c.startProgress("aggregating " + c.adm.Table())
	stats, err := c.adm.Stats(ctx, c.o.filter)
	p.stop()
	// A --scope no record has may still be one the metrics know (its records expired and were
	// swept, or purged, while the processes that counted its calls run on): asked below.
	unknown := err
	if err != nil && (c.o.metrics == "" || !errors.Is(err, admin.ErrUnknownScope)) {
		return err
	}
	var calls map[string]*callCounts
	var failed []error // instances whose /metrics could not be read: the others still count
	var urls []string
	if c.o.metrics != "" {
		for _, u := range strings.Split(c.o.metrics, ",") {
			if u = strings.TrimSpace(u); u != "" {
				urls = append(urls, u)
			}
		}
		if calls, failed, err = scrapeCalls(ctx, urls); err != nil {
			return err
		}
		// Scopes the metrics know but the table has no record of (yet, or no longer).
		seen := map[string]bool{}
		for _, s := range stats {
			seen[s.Scope] = true
		}
		var extra []string
		for scope := range calls {
			if !seen[scope] && (c.o.filter.Scope == "" || scope == c.o.filter.Scope) {
				extra = append(extra, scope)
			}
		}
		sort.Strings(extra)
		for _, s := range extra {
			stats = append(stats, admin.ScopeStats{Scope: s})
		}
	}
	if unknown != nil && len(stats) == 0 {
		return errors.Join(unknown, scrapeErr(failed, len(urls))) // neither the table nor the metrics know it
	}
	now := c.now()
	if c.o.json {
		out := make([]statsJSON, len(stats))
		for i, s := range stats {
			out[i] = statsJSON{ScopeStats: s}
			if cc := calls[s.Scope]; cc != nil {
				out[i].Calls = cc
				if r := cc.rate(); r >= 0 {
					out[i].DuplicateRate = &r
				}
			}
		}
		errs := make([]string, len(failed))
		for i, e := range failed {
			errs[i] = e.Error()
		}
		c.writeJSON(map[string]any{"scopes": out, "duplicate_rate_source": c.rateSource(len(urls), len(failed)), "metrics_errors": errs})
		return scrapeErr(failed, len(urls))
	}
	if len(stats) == 0 {
		fmt.Fprintln(c.stdout, "no records")
		return scrapeErr(failed, len(urls))
	}
	header := []string{"SCOPE", "TOTAL", "PROCESSING", "STUCK", "SUCCEEDED", "FAILED", "REJECTED", "TAKEN OVER", "EXPIRED", "OLDEST CLAIM", "DUPLICATES"}
	t := newTable(c.stdout, header...)
	for _, s := range stats {
		dup := "n/a"
		if cc := calls[s.Scope]; cc != nil {
			if r := cc.rate(); r >= 0 {
				dup = fmt.Sprintf("%.1f%% (%.0f of %.0f)", 100*r, cc.Duplicates, cc.Duplicates+cc.Runs)
			}
		}
		oldest := "-"
		if !s.OldestProcessing.IsZero() {
			oldest = ago(now, s.OldestProcessing)
		}
		t.row(s.Scope, fmt.Sprint(s.Total), fmt.Sprint(s.Processing), fmt.Sprint(s.Stuck), fmt.Sprint(s.Succeeded),
			fmt.Sprint(s.Failed), fmt.Sprint(s.Rejected), fmt.Sprint(s.TakenOver), fmt.Sprint(s.Expired), oldest, dup)
	}
	t.flush()
	fmt.Fprintf(c.stdout, "\nDUPLICATES: %s\n", c.rateSource(len(urls), len(failed)))
	return scrapeErr(failed, len(urls))
}

// scrapeErr reports the instances whose /metrics could not be read (exit 1), once the statistics
// were printed without them.
func scrapeErr(failed []error, of int) error {
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("the duplicate rate leaves out %d of %d instance(s): %w", len(failed), of, errors.Join(failed...))
}

// rateSource says where the duplicate rate comes from: of instances scraped, failed could not be read.
func (c *cli) rateSource(of, failed int) string {
	if c.o.metrics == "" {
		return "not in the table (a replay writes nothing); pass --metrics with the applications' /metrics URLs, or see the Grafana dashboard"
	}
	src := "idemkit_calls_total since the scraped processes started: outcomes replayed+in_flight+mismatch+duplicate over those plus executed+detached"
	if failed > 0 {
		src += fmt.Sprintf(" — from %d of %d instances only (the others could not be read: see the error)", of-failed, of)
	}
	return src
}
