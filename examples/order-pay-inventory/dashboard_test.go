package main

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/admin"
	"github.com/idemkit/idemkit/hooks"
	"github.com/idemkit/idemkit/idemtest"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/record"
	"github.com/idemkit/idemkit/sweep"
	"github.com/idemkit/idemkit/txstatus"
)

// dashboardFile is the Grafana dashboard docker compose provisions.
const dashboardFile = "../../deploy/grafana/idemkit.json"

// promqlWords are the PromQL words that are not metric names: aggregations, functions taking no
// parentheses after a space, keywords and operators.
var promqlWords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true, "inf": true, "nan": true,
}

// metricNames returns the metric names a PromQL expression selects: identifiers that are not
// functions (followed by '('), aggregations, keywords, label names (inside {...} or the label list
// of by/without/on/ignoring/group_left/group_right), strings, durations ([...]) or Grafana variables
// ($name, ${name}).
func metricNames(expr string) []string {
	var out []string
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	skipTo := func(i int, open, close byte) int { // i at open; returns the index after the matching close
		depth := 0
		for ; i < len(expr); i++ {
			switch c := expr[i]; {
			case c == '"' || c == '\'' || c == '`':
				for i++; i < len(expr) && expr[i] != c; i++ {
					if expr[i] == '\\' {
						i++
					}
				}
			case c == open:
				depth++
			case c == close:
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	nextNonSpace := func(i int) int {
		for i < len(expr) && (expr[i] == ' ' || expr[i] == '\t' || expr[i] == '\n') {
			i++
		}
		return i
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		case c == '{':
			i = skipTo(i, '{', '}')
		case c == '[':
			i = skipTo(i, '[', ']')
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				i = skipTo(i, '{', '}')
				continue
			}
			for i < len(expr) && isPart(expr[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++
			}
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := nextNonSpace(j)
			switch {
			case word == "by" || word == "without" || word == "on" || word == "ignoring" || word == "group_left" || word == "group_right":
				if k < len(expr) && expr[k] == '(' {
					j = skipTo(k, '(', ')')
				}
			case k < len(expr) && expr[k] == '(':
				// a function or an aggregation
			case promqlWords[strings.ToLower(word)]:
			default:
				if !slices.Contains(out, word) {
					out = append(out, word)
				}
			}
			i = j
		default:
			i++
		}
	}
	return out
}

func TestMetricNamesOfPromQL(t *testing.T) {
	cases := []struct {
		expr string
		want []string
	}{
		{`sum by (idemkit_scope, idemkit_outcome) (rate(idemkit_calls_total{idemkit_scope=~"$scope"}[$__rate_interval]))`, []string{"idemkit_calls_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="y{z}"}[5m]))) / ignoring(le) b + on (x) group_left(y) c offset 5m`, []string{"a_bucket", "b", "c"}},
		{`sum(idemkit_records_stuck{idemkit_scope=~"${scope}"}) or vector(0)`, []string{"idemkit_records_stuck"}},
		{`label_values(idemkit_calls_total, idemkit_scope)`, []string{"idemkit_calls_total", "idemkit_scope"}},
		{`max without (instance) (up) > bool 1e3`, []string{"up"}},
	}
	for _, c := range cases {
		if got := metricNames(c.expr); !slices.Equal(got, c.want) {
			t.Errorf("metricNames(%q) = %q, want %q", c.expr, got, c.want)
		}
	}
}

// dashboardQueries returns every PromQL expression of the dashboard, by panel title, and the
// variables' label_values queries.
func dashboardQueries(t *testing.T) (panels map[string][]string, vars []string) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	panels = map[string][]string{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			panels[p.Title] = append(panels[p.Title], tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok && v.Type == "query" {
			s, _ := q["query"].(string)
			vars = append(vars, s)
		}
	}
	return panels, vars
}

// TestDashboardUsesOnlyEmittedMetrics: every metric name a query of deploy/grafana/idemkit.json
// uses is one the example's exporter emits once each kind of event happened, and the panels the issue
// asks for are there.
func TestDashboardUsesOnlyEmittedMetrics(t *testing.T) {
	panels, vars := dashboardQueries(t)
	for _, title := range []string{"Request outcomes per scope", "Duplicate rate per scope", "Guarded call latency p50 / p99",
		"In-flight rejections and payload mismatches", "Takeovers and fenced finishes", "Fail-open events", "Stuck PROCESSING",
		"Reconciler: settled by outcome, fenced gids, errors"} {
		if _, ok := panels[title]; !ok {
			t.Errorf("the dashboard has no panel %q", title)
		}
	}

	emitted := emitEverything(t)
	used := map[string][]string{} // metric -> panels
	for title, exprs := range panels {
		for _, e := range exprs {
			names := metricNames(e)
			if len(names) == 0 {
				t.Errorf("panel %q: no metric in %q", title, e)
			}
			for _, n := range names {
				used[n] = append(used[n], title)
			}
		}
	}
	for _, v := range vars {
		if n := metricNames(v); len(n) > 0 {
			used[n[0]] = append(used[n[0]], "variable") // label_values(metric, label): the first is the metric
		}
	}
	var names []string
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) < 12 {
		t.Fatalf("the dashboard uses only %d metric names (%q): the parser or the dashboard is broken", len(names), names)
	}
	for _, n := range names {
		if !emitted[n] {
			t.Errorf("metric %s (panels %q) is not emitted by the exporter", n, used[n])
		}
	}
	t.Logf("dashboard metrics: %q", names)
}

// emitEverything returns the metric names the exporter emits once every kind of event happened
// (emitFamilies), a histogram's as name_bucket, name_sum and name_count.
func emitEverything(t *testing.T) map[string]bool {
	t.Helper()
	emitted := map[string]bool{}
	for name, f := range emitFamilies(t) {
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				emitted[name+s] = true
			}
			continue
		}
		emitted[name] = true
	}
	return emitted
}

// emitFamilies drives the example's metrics through every kind of event — new key, cached and
// stored replay, in-flight rejection, mismatch, takeover, fenced finish, fail-open, sweeper rows and
// errors, PROCESSING claims of a real record table, the reconciler's settlements, fenced gids and
// failures — and returns the metric families the exporter then emits.
func emitFamilies(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	db := testsvc.SQLite(t, nil)
	store, err := record.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := store.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	clock := idemtest.NewClock()
	adm, err := admin.New(db, &admin.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMetrics(adm.Claims)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.close(ctx) })

	g, err := idemkit.New(store, &idemkit.Options{Observer: m.observer, Locker: memory.NewLocker(nil), Now: clock.Now, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	run := func(g *idemkit.Guard, key, fp string) error {
		_, err := g.Do(ctx, idemkit.Call{Scope: "POST /x", Key: key, Fingerprint: fp}, func(context.Context) ([]byte, error) { return []byte("v"), nil })
		return err
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(run(g, "a", "f"))                                                        // new key
	must(run(g, "a", "f"))                                                        // replay from the cache
	if err := run(g, "a", "other"); !errors.Is(err, idemkit.ErrPayloadMismatch) { // mismatch
		t.Fatal(err)
	}
	noCache, err := idemkit.New(store, &idemkit.Options{Observer: m.observer, Now: clock.Now, Lease: time.Minute})
	must(err)
	must(run(noCache, "a", "f")) // replay from the store
	held, _, err := g.Begin(ctx, idemkit.Call{Scope: "POST /x", Key: "b"})
	must(err)
	if err := run(noCache, "b", ""); !errors.Is(err, idemkit.ErrInFlight) { // in flight
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	must(run(noCache, "b", ""))                                                              // takeover
	if _, err := held.Finish(ctx, []byte("late"), nil); !errors.Is(err, idemkit.ErrFenced) { // fenced
		t.Fatal(err)
	}
	failing, err := idemkit.New(store, &idemkit.Options{Observer: m.observer, Locker: brokenLocker{}, FailOpen: true, Now: clock.Now})
	must(err)
	must(run(failing, "c", "")) // fail-open
	stuck, _, err := g.Begin(ctx, idemkit.Call{Scope: "POST /x", Key: "d"})
	must(err)
	stuck.Detach(ctx)
	clock.Advance(2 * time.Minute) // a PROCESSING claim whose lease ran out: the record gauges
	for _, task := range m.observer.Tasks(
		sweep.Task{Name: "reconcile", Run: func(context.Context, time.Time, int) (int, error) { return 1, nil }},
		sweep.Task{Name: "barrier", Run: func(context.Context, time.Time, int) (int, error) { return 0, errors.New("down") }},
	) {
		_, _ = task.Run(ctx, clock.Now(), 10)
	}

	// The reconciler's events: a settlement, a fenced gid, a failure.
	for _, ev := range []hooks.ReconcileEvent{
		{Scope: scopeSaga, Settled: true, Status: txstatus.Succeed},
		{Scope: scopeSaga, Fenced: true, Settled: true, Status: txstatus.Failed},
		{Scope: scopeTCC, Err: errors.New("dtm down")},
	} {
		m.observer.Reconciled(ctx, &ev)
	}

	srv := httptest.NewServer(m.handler)
	t.Cleanup(srv.Close)
	return scrape(t, srv.URL)
}

// brokenLocker fails every call, like an unreachable Redis.
type brokenLocker struct{}

func (brokenLocker) Acquire(context.Context, string, string, time.Duration) ([]byte, error) {
	return nil, errors.New("redis down")
}
func (brokenLocker) Refresh(context.Context, string, string, time.Duration) error {
	return errors.New("redis down")
}
func (brokenLocker) Release(context.Context, string, string, []byte, time.Duration) error {
	return errors.New("redis down")
}

// TestDashboardCountsTableGaugesOnce: the record gauges idemkit_records_stuck and
// idemkit_records_processing are read from the shared record table by every instance that passes
// idemotel.Options.Claims, so N instances export N copies of one count. A query must take one copy per
// application (max by job and scope) before it adds scopes up: summed over instances, 3 instances
// showed every stuck claim 3 times. (The oldest claim's age is a maximum already.)
func TestDashboardCountsTableGaugesOnce(t *testing.T) {
	panels, _ := dashboardQueries(t)
	const once = "max by (job, idemkit_scope) ("
	seen := 0
	for title, exprs := range panels {
		for _, e := range exprs {
			for _, n := range metricNames(e) {
				if n != "idemkit_records_stuck" && n != "idemkit_records_processing" {
					continue
				}
				seen++
				for rest := e; ; {
					i := strings.Index(rest, n)
					if i < 0 {
						break
					}
					if !strings.HasSuffix(strings.TrimRight(rest[:i], " "), once) {
						t.Errorf("panel %q: %s is not taken once per application (%q) in %q", title, n, once, e)
					}
					rest = rest[i+len(n):]
				}
			}
		}
	}
	if seen < 3 {
		t.Fatalf("only %d queries use the record gauges: the parser or the dashboard is broken", seen)
	}
}

// TestREADMEMetricsTable: the README's Metrics table names every idemkit metric the exporter emits,
// with its type and its labels (besides the exporter's otel_scope_* ones), and no other.
func TestREADMEMetricsTable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, text, ok := strings.Cut(string(b), "\n### Metrics\n")
	if !ok {
		t.Fatal("README.md has no Metrics section")
	}
	text, _, _ = strings.Cut(text, "\n### ")
	type row struct{ typ, labels string }
	documented := map[string]row{}
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "| `idemkit_") {
			continue
		}
		cells := strings.Split(l, " | ")
		if len(cells) < 3 {
			t.Fatalf("README Metrics row %q: want name, type, labels", l)
		}
		var labels []string
		for _, lb := range strings.Split(cells[2], ",") {
			lb, _, _ = strings.Cut(strings.TrimSpace(lb), " ") // "task (`delete_expired`, …)": the name
			if lb = strings.TrimSpace(lb); lb != "" && !strings.HasPrefix(lb, "`") && !strings.HasSuffix(lb, ")") {
				labels = append(labels, "idemkit_"+lb)
			}
		}
		slices.Sort(labels)
		documented[strings.Trim(strings.TrimPrefix(cells[0], "| "), "`")] = row{cells[1], strings.Join(labels, ",")}
	}
	if len(documented) < 15 {
		t.Fatalf("the README's Metrics table has %d rows: its parsing is broken", len(documented))
	}

	types := map[dto.MetricType]string{dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge", dto.MetricType_HISTOGRAM: "histogram"}
	for name, f := range emitFamilies(t) {
		if !strings.HasPrefix(name, "idemkit_") {
			continue
		}
		doc, ok := documented[name]
		if !ok {
			t.Errorf("%s is emitted but not in the README's Metrics table", name)
			continue
		}
		delete(documented, name)
		if typ := types[f.GetType()]; typ != doc.typ {
			t.Errorf("%s: the README says %s, the exporter emits a %s", name, doc.typ, typ)
		}
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !strings.HasPrefix(lp.GetName(), "otel_scope_") {
					labels[lp.GetName()] = true
				}
			}
		}
		got := slices.Sorted(maps.Keys(labels))
		if strings.Join(got, ",") != doc.labels {
			t.Errorf("%s: the README lists labels %s, the exporter emits %s", name, doc.labels, strings.Join(got, ","))
		}
	}
	for name := range documented {
		t.Errorf("%s is in the README's Metrics table but never emitted", name)
	}
}
