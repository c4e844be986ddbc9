package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// The counter and labels idemctl reads from an application's /metrics: idemotel's idemkit.calls
// through the OpenTelemetry Prometheus exporter.
const (
	callsMetric  = "idemkit_calls_total"
	scopeLabel   = "idemkit_scope"
	outcomeLabel = "idemkit_outcome"
)

// duplicateOutcomes are the outcomes of calls that found their key used before.
var duplicateOutcomes = map[string]bool{"replayed": true, "in_flight": true, "mismatch": true, "duplicate": true}

// firstOutcomes are the outcomes of calls that ran: the first use of a key (or a retry after a failure).
var firstOutcomes = map[string]bool{"executed": true, "detached": true}

// callCounts are a scope's calls since the scraped processes started.
type callCounts struct {
	Duplicates float64 `json:"duplicates"`
	Runs       float64 `json:"runs"`
}

// rate is the duplicate rate, or -1 when no call was counted.
func (c callCounts) rate() float64 {
	if c.Duplicates+c.Runs == 0 {
		return -1
	}
	return c.Duplicates / (c.Duplicates + c.Runs)
}

// scrapeCalls sums idemkit_calls_total per scope over the /metrics pages at urls. An instance that
// cannot be read (down, answering an error or a page that does not parse) is left out and its error
// returned in failed, so the others still count; err is a malformed URL (a usage error).
func scrapeCalls(ctx context.Context, urls []string) (out map[string]*callCounts, failed []error, err error) {
	out = map[string]*callCounts{}
	for _, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, nil, usagef("--metrics %q: %v", u, err)
		}
		page := map[string]*callCounts{}
		if err := scrapeOne(req, page); err != nil {
			failed = append(failed, fmt.Errorf("scraping %s: %w", u, err))
			continue
		}
		for scope, c := range page {
			t := out[scope]
			if t == nil {
				t = &callCounts{}
				out[scope] = t
			}
			t.Duplicates += c.Duplicates
			t.Runs += c.Runs
		}
	}
	return out, failed, nil
}

// scrapeOne reads one instance's /metrics into page.
func scrapeOne(req *http.Request, page map[string]*callCounts) error {
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return parseCalls(io.LimitReader(resp.Body, 64<<20), page)
}

// parseCalls adds the samples of callsMetric in a Prometheus text exposition to out.
func parseCalls(r io.Reader, out map[string]*callCounts) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, callsMetric)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		labels, value, err := parseSample(rest)
		if err != nil {
			return fmt.Errorf("parsing %q: %w", line, err)
		}
		c := out[labels[scopeLabel]]
		if c == nil {
			c = &callCounts{}
			out[labels[scopeLabel]] = c
		}
		switch o := labels[outcomeLabel]; {
		case duplicateOutcomes[o]:
			c.Duplicates += value
		case firstOutcomes[o]:
			c.Runs += value
		}
	}
	return sc.Err()
}

// parseSample parses `{name="value",...} 12 [timestamp]` (labels optional).
func parseSample(s string) (map[string]string, float64, error) {
	labels := map[string]string{}
	if strings.HasPrefix(s, "{") {
		s = s[1:]
		for {
			s = strings.TrimLeft(s, " ,")
			if strings.HasPrefix(s, "}") {
				s = s[1:]
				break
			}
			eq := strings.Index(s, `="`)
			if eq < 0 {
				return nil, 0, errors.New("malformed labels")
			}
			name := strings.TrimSpace(s[:eq])
			s = s[eq+2:]
			var val strings.Builder
			closed := false
			for i := 0; i < len(s); i++ {
				switch s[i] {
				case '\\':
					if i+1 < len(s) {
						i++
						switch s[i] {
						case 'n':
							val.WriteByte('\n')
						default:
							val.WriteByte(s[i])
						}
					}
					continue
				case '"':
					s, closed = s[i+1:], true
				}
				if closed {
					break
				}
				val.WriteByte(s[i])
			}
			if !closed {
				return nil, 0, errors.New("unterminated label value")
			}
			labels[name] = val.String()
		}
	}
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, 0, errors.New("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return nil, 0, err
	}
	return labels, v, nil
}
