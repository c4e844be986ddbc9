package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/sweep"
)

// scrape reads the Prometheus exposition at url.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

// sample sums the series of family name whose labels include want: counter and gauge values, or a
// histogram's sample count.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
series:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue series
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// TestMetricsCountWhatWasDone runs the example on MariaDB, Redis and a DTM server with traffic — new
// orders, duplicate retries, a key reused with another body, a duplicate of a request in flight, a
// forced takeover of a stuck claim — and a sweeper pass with one record of each kind of work, scraping
// /metrics before and after: idemkit's counters move by exactly what was done, the gauges show the
// stuck claims, and no series carries an idempotency key.
func TestMetricsCountWhatWasDone(t *testing.T) {
	t.Parallel()
	cfg := mariaDBConfig(t)
	cfg.SweepInterval = time.Hour // the test runs the sweeper pass itself
	svc := startServices(t, cfg)
	ctx := context.Background()
	c := newClient(svc.URL)
	if err := c.put(ctx, "/api/accounts/alice", map[string]int64{"balance": 1_000_000}); err != nil {
		t.Fatal(err)
	}
	if err := c.put(ctx, "/api/inventory/apple", map[string]int64{"stock": 1_000}); err != nil {
		t.Fatal(err)
	}
	metricsURL := svc.URL + "/metrics"
	before := scrape(t, metricsURL)

	const scope = "POST /api/orders"
	tag := testsvc.Name("m")
	body := orderRequest{UserID: "alice", SKU: "apple", Qty: 1, Amount: 100}
	post := func(key string, body orderRequest, want int) *response {
		t.Helper()
		r, err := c.do(ctx, http.MethodPost, "/api/orders", key, body)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != want {
			t.Fatalf("POST %s: %s, want %d", key, r, want)
		}
		return r
	}
	keys := []string{tag + "-1", tag + "-2", tag + "-3"}
	for _, k := range keys {
		post(k, body, http.StatusCreated)
	}
	for range 2 { // every client retries twice
		for _, k := range keys {
			if r := post(k, body, http.StatusCreated); !r.replayed() {
				t.Fatalf("retry of %s not replayed: %s", k, r)
			}
		}
	}
	other := body
	other.Qty = 2
	post(keys[0], other, http.StatusUnprocessableEntity) // the key reused with another body

	// A request still running elsewhere (a live claim), and one whose holder died (lease run out).
	now := time.Now()
	live := &idemkit.Record{Scope: scope, Key: tag + "-live", Status: idemkit.StatusProcessing, Fence: 1, Owner: "somebody",
		LeaseUntil: now.Add(time.Hour), ExpiresAt: now.Add(24 * time.Hour), CreatedAt: now, UpdatedAt: now}
	stuck := &idemkit.Record{Scope: scope, Key: tag + "-stuck", Status: idemkit.StatusProcessing, Fence: 1, Owner: "dead",
		LeaseUntil: now.Add(-time.Minute), ExpiresAt: now.Add(24 * time.Hour), CreatedAt: now.Add(-2 * time.Minute), UpdatedAt: now.Add(-2 * time.Minute)}
	for _, r := range []*idemkit.Record{live, stuck} {
		if err := svc.store.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	mid := scrape(t, metricsURL)
	if got := sample(mid, "idemkit_records_stuck", map[string]string{"idemkit_scope": scope}); got != 1 {
		t.Fatalf("idemkit_records_stuck{%s} = %v, want 1", scope, got)
	}
	if got := sample(mid, "idemkit_records_processing", map[string]string{"idemkit_scope": scope}); got != 2 {
		t.Fatalf("idemkit_records_processing{%s} = %v, want 2", scope, got)
	}
	if r := post(live.Key, body, http.StatusConflict); !r.inFlight() {
		t.Fatalf("duplicate of a running request: %s", r)
	}
	post(stuck.Key, body, http.StatusCreated) // takes the stuck claim over

	// One record for each sweeper task: expired, stale claim, claim of a transaction DTM never saw.
	fodder := []*idemkit.Record{
		{Scope: "metrics-test", Key: tag + "-expired", Status: idemkit.StatusSucceeded, Fence: 1,
			LeaseUntil: now.Add(-2 * time.Hour), ExpiresAt: now.Add(-time.Minute), CreatedAt: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-2 * time.Hour)},
		{Scope: "metrics-test", Key: tag + "-stale", Status: idemkit.StatusProcessing, Fence: 1, Owner: "dead",
			LeaseUntil: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour), CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour)},
		{Scope: scopeSaga, Key: tag + "-orphan", Status: idemkit.StatusProcessing, Fence: 1, Owner: "dead", GID: "idk" + tag + "orphan",
			LeaseUntil: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour), CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Hour)},
	}
	for _, r := range fodder {
		if err := svc.store.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := sample(scrape(t, metricsURL), "idemkit_records_stuck", map[string]string{"idemkit_scope": "metrics-test"}); got != 1 {
		t.Fatalf("idemkit_records_stuck{metrics-test} = %v, want 1", got)
	}
	for {
		_, err := svc.sweeper.RunOnce(ctx)
		if errors.Is(err, sweep.ErrSkipped) { // the pass Start runs holds the sweeper lock
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	after := scrape(t, metricsURL)

	delta := func(name string, labels map[string]string) float64 {
		return sample(after, name, labels) - sample(before, name, labels)
	}
	in := func(kv ...string) map[string]string {
		m := map[string]string{"idemkit_scope": scope}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"idemkit_calls_total", in("idemkit_outcome", "executed", "idemkit_status", "SUCCEEDED"), 4}, // 3 new keys and the takeover
		{"idemkit_calls_total", in("idemkit_outcome", "executed"), 4},
		{"idemkit_calls_total", in("idemkit_outcome", "replayed"), 6},
		{"idemkit_calls_total", in("idemkit_outcome", "mismatch"), 1},
		{"idemkit_calls_total", in("idemkit_outcome", "in_flight"), 1},
		{"idemkit_calls_total", in(), 12},
		{"idemkit_new_keys_total", in(), 3},
		{"idemkit_replays_total", in("idemkit_source", "cache"), 6},
		{"idemkit_replays_total", in("idemkit_source", "store"), 0},
		{"idemkit_takeovers_total", in(), 1},
		{"idemkit_store_conflicts_total", in(), 2}, // the in-flight duplicate and the takeover reached the table
		{"idemkit_fenced_total", in(), 0},
		{"idemkit_fail_open_total", in(), 0},
		{"idemkit_duration_seconds", in(), 12},
		{"idemkit_duration_seconds", in("idemkit_outcome", "replayed"), 6},
		{"idemkit_claim_duration_seconds", in(), 4},
		{"idemkit_sweep_rows_total", map[string]string{"idemkit_task": "delete_expired"}, 1},
		{"idemkit_sweep_rows_total", map[string]string{"idemkit_task": "recover_stale"}, 1},
		{"idemkit_sweep_rows_total", map[string]string{"idemkit_task": "reconcile"}, 1},
		{"idemkit_sweep_rows_total", map[string]string{"idemkit_task": "barrier"}, 0},
		{"idemkit_sweep_errors_total", nil, 0},
		{"idemkit_records_stuck", map[string]string{"idemkit_scope": "metrics-test"}, 0}, // a gauge: its change
	}
	for _, c := range checks {
		if got := delta(c.name, c.labels); got != c.want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got := sample(after, "idemkit_records_stuck", map[string]string{"idemkit_scope": scope}); got != 0 {
		t.Errorf("idemkit_records_stuck{%s} = %v after the takeover, want 0", scope, got)
	}
	if rec, err := svc.store.Get(ctx, "metrics-test", tag+"-stale"); err != nil || rec.Status != idemkit.StatusFailed {
		t.Errorf("the stale claim after the sweep: %+v %v", rec, err)
	}
	for name, f := range after {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), tag) {
					t.Errorf("%s carries a key in label %s=%q", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}
